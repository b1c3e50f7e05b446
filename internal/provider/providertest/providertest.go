// Package providertest is the conformance suite every provider adapter
// runs against its own faithful mock (as storetest is for stores): how it
// classifies every error code its provider documents, how it refreshes an
// expired credential, what it reports for each recipient of a call that
// partly fails, what a timeout before and after the request went out
// becomes, and whether repeating a message key can deliver twice.
//
// An adapter's test calls Run with an Adapter describing what its provider
// documents; each subtest builds a fresh Fixture (its own mock), so
// subtests run in parallel.
package providertest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/qunfa/qunfa/internal/provider"
)

// Adapter is one provider adapter under test and what its provider
// documents.
type Adapter struct {
	// New builds the adapter talking to a fresh mock of its provider.
	New func(t *testing.T) Fixture
	// Codes lists every error code the provider documents, with the
	// category the adapter must give a call refused with it.
	Codes []Code
	// MaxPerCall is how many recipients one call may carry (1: one per
	// call).
	MaxPerCall int
	// IdempotentKeys: the provider delivers a message key at most once,
	// so the same key sent twice is one delivery. Without it the same key
	// twice is two deliveries, and only qunfa's claims prevent a resend.
	IdempotentKeys bool
	// StatusLookup: the provider answers a status look-up by message key;
	// without it Status returns provider.ErrStatusUnsupported.
	StatusLookup bool
	// MinPerCall is the fewest recipients one call of the provider takes
	// (0: one). The suite pads its one-recipient calls to it.
	MinPerCall int
	// WholeCallResults: the provider accepts or refuses a call whole and
	// reports no recipient's result (WeChat's mass send: an invalid
	// OpenID is not delivered, and only a later count says so).
	WholeCallResults bool
	// StatusByMsgID: the look-up is by the provider's message id of the
	// accepted call (StatusRequest.MsgID); without one Status returns
	// provider.ErrStatusUnsupported.
	StatusByMsgID bool
	// Account turns a name of the suite into an account id of the
	// provider (nil: the name as it is).
	Account func(name string) string
}

// account is the provider's id of the suite's account name.
func (a Adapter) account(name string) string {
	if a.Account == nil {
		return name
	}
	return a.Account(name)
}

// Code is one documented error code and the category it means.
type Code struct {
	Code     string
	Category provider.Category
}

// Fixture is an adapter wired to its own mock.
type Fixture struct {
	// Provider is the adapter under test. Its answer timeout must be
	// short (well under a second): the suite waits for it once.
	Provider provider.Provider
	// Unreachable is the same adapter pointed at an address nothing
	// listens on.
	Unreachable provider.Provider
	// Mock drives and observes the mock provider.
	Mock Mock
}

// Mock is the adapter's mock provider as the suite drives it. Every
// method acts on one account only.
type Mock interface {
	// Deliveries counts the messages delivered to account's recipients.
	Deliveries(account string) int
	// Refuse makes every call of account answer code (a code of Codes).
	Refuse(t *testing.T, account, code string)
	// InvalidRecipient makes account refuse recipient to as invalid.
	InvalidRecipient(t *testing.T, account, to string)
	// HoldAnswers makes account deliver every call and never answer it.
	HoldAnswers(t *testing.T, account string)
	// ExpireCredential expires the credential account's calls go out
	// with. With renewable the adapter can obtain a fresh one (a new
	// access token, a rotated secret); without, it cannot.
	ExpireCredential(t *testing.T, account string, renewable bool)
}

// Run runs the suite.
func Run(t *testing.T, a Adapter) {
	t.Helper()
	if a.New == nil || a.MaxPerCall < 1 {
		t.Fatal("providertest: Adapter needs New and MaxPerCall >= 1")
	}
	t.Run("SingleRecipientIsAcceptedOnce", func(t *testing.T) { t.Parallel(); testSingle(t, a) })
	t.Run("EveryDocumentedCodeIsClassified", func(t *testing.T) { t.Parallel(); testCodes(t, a) })
	t.Run("ExpiredCredentialIsRefreshed", func(t *testing.T) { t.Parallel(); testCredentialRefresh(t, a) })
	t.Run("CredentialThatCannotBeRenewedIsAccountDown", func(t *testing.T) { t.Parallel(); testCredentialDead(t, a) })
	t.Run("PartialFailureGivesEachRecipientItsResult", func(t *testing.T) { t.Parallel(); testPartial(t, a) })
	t.Run("FullCallIsAccepted", func(t *testing.T) { t.Parallel(); testFullCall(t, a) })
	t.Run("TimeoutBeforeSendIsRetryable", func(t *testing.T) { t.Parallel(); testBeforeSend(t, a) })
	t.Run("TimeoutAfterSendIsUncertain", func(t *testing.T) { t.Parallel(); testAfterSend(t, a) })
	t.Run("RepeatedKey", func(t *testing.T) { t.Parallel(); testRepeatedKey(t, a) })
	t.Run("StatusLookup", func(t *testing.T) { t.Parallel(); testStatus(t, a) })
}

// request is a call of account to recipients to, keyed "<account>-<to>",
// padded to MinPerCall recipients.
func (a Adapter) request(account string, to ...string) provider.SendRequest {
	for i := 1; len(to) < a.MinPerCall; i++ {
		to = append(to, fmt.Sprintf("%s-peer%d", to[0], i))
	}
	keys := make([]string, len(to))
	for i, r := range to {
		keys[i] = account + "-" + r
	}
	return provider.SendRequest{Account: account, Keys: keys, To: to, Content: "hello from the conformance suite"}
}

func send(t *testing.T, p provider.Provider, req provider.SendRequest) []provider.RecipientResult {
	t.Helper()
	res, err := p.Send(context.Background(), req)
	if err != nil {
		t.Fatalf("Send(%s, %d recipients): %v", req.Account, len(req.To), err)
	}
	if len(res.Recipients) != len(req.To) {
		t.Fatalf("Send gave %d results for %d recipients", len(res.Recipients), len(req.To))
	}
	return res.Recipients
}

func wantDeliveries(t *testing.T, m Mock, account string, want int) {
	t.Helper()
	if got := m.Deliveries(account); got != want {
		t.Fatalf("the mock delivered %d messages on %s, want %d", got, account, want)
	}
}

func testSingle(t *testing.T, a Adapter) {
	f := a.New(t)
	req := a.request(a.account("acct-single"), "u1")
	r := send(t, f.Provider, req)[0]
	if !r.Accepted || r.Category != "" || r.MsgID == "" {
		t.Fatalf("result = %+v, want accepted with the provider's message id", r)
	}
	wantDeliveries(t, f.Mock, a.account("acct-single"), len(req.To))
}

func testCodes(t *testing.T, a Adapter) {
	if len(a.Codes) == 0 {
		t.Fatal("the adapter documents no error code")
	}
	f := a.New(t)
	for _, c := range a.Codes {
		account := a.account("acct-code-" + c.Code)
		f.Mock.Refuse(t, account, c.Code)
		r := send(t, f.Provider, a.request(account, "u1"))[0]
		if r.Accepted || r.Category != c.Category || r.Code != c.Code {
			t.Errorf("code %s: result = %+v, want category %q with code %s", c.Code, r, c.Category, c.Code)
		}
		if n := f.Mock.Deliveries(account); n != 0 {
			t.Errorf("code %s: the mock delivered %d messages, want none", c.Code, n)
		}
	}
}

func testCredentialRefresh(t *testing.T, a Adapter) {
	f := a.New(t)
	account := a.account("acct-cred")
	if r := send(t, f.Provider, a.request(account, "u1"))[0]; !r.Accepted {
		t.Fatalf("first send: %+v, want accepted", r)
	}
	f.Mock.ExpireCredential(t, account, true)
	if r := send(t, f.Provider, a.request(account, "u2"))[0]; !r.Accepted {
		t.Fatalf("send after the credential expired: %+v, want accepted with a refreshed credential", r)
	}
	wantDeliveries(t, f.Mock, account, 2*max(1, a.MinPerCall))
}

func testCredentialDead(t *testing.T, a Adapter) {
	f := a.New(t)
	account := a.account("acct-dead")
	f.Mock.ExpireCredential(t, account, false)
	r := send(t, f.Provider, a.request(account, "u1"))[0]
	if r.Accepted || r.Category != provider.AccountDown {
		t.Fatalf("result = %+v, want %q", r, provider.AccountDown)
	}
	wantDeliveries(t, f.Mock, account, 0)
}

func testPartial(t *testing.T, a Adapter) {
	if a.MaxPerCall < 3 {
		t.Skipf("one call carries at most %d recipients", a.MaxPerCall)
	}
	f := a.New(t)
	account := a.account("acct-partial")
	f.Mock.InvalidRecipient(t, account, "bad")
	rs := send(t, f.Provider, a.request(account, "u1", "bad", "u2"))
	if a.WholeCallResults {
		for i, r := range rs {
			if !r.Accepted || r.MsgID == "" {
				t.Errorf("recipient %d of a call accepted whole: %+v, want accepted with the call's message id", i, r)
			}
		}
		wantDeliveries(t, f.Mock, account, 2)
		return
	}
	for i, want := range []bool{true, false, true} {
		if rs[i].Accepted != want {
			t.Errorf("recipient %d: %+v, accepted want %v", i, rs[i], want)
		}
	}
	if rs[1].Category != provider.Permanent {
		t.Errorf("invalid recipient: category %q, want %q", rs[1].Category, provider.Permanent)
	}
	if rs[0].MsgID == "" || rs[2].MsgID == "" {
		t.Errorf("accepted recipients carry no message id: %+v", rs)
	}
	wantDeliveries(t, f.Mock, account, 2)
}

func testFullCall(t *testing.T, a Adapter) {
	f := a.New(t)
	account := a.account("acct-full")
	to := make([]string, a.MaxPerCall)
	for i := range to {
		to[i] = fmt.Sprintf("u%d", i)
	}
	for i, r := range send(t, f.Provider, a.request(account, to...)) {
		if !r.Accepted {
			t.Fatalf("recipient %d of a full call: %+v, want accepted", i, r)
		}
	}
	wantDeliveries(t, f.Mock, account, a.MaxPerCall)
}

func testBeforeSend(t *testing.T, a Adapter) {
	f := a.New(t)
	if f.Unreachable == nil {
		t.Fatal("the fixture has no unreachable adapter")
	}
	for _, r := range send(t, f.Unreachable, a.request(a.account("acct-down"), "u1")) {
		if r.Accepted || r.Category != provider.Retryable {
			t.Fatalf("result = %+v, want %q: nothing went out", r, provider.Retryable)
		}
	}
}

func testAfterSend(t *testing.T, a Adapter) {
	f := a.New(t)
	account := a.account("acct-held")
	f.Mock.HoldAnswers(t, account)
	n := min(a.MaxPerCall, 2)
	to := []string{"u1", "u2"}[:n]
	for i, r := range send(t, f.Provider, a.request(account, to...)) {
		if r.Accepted || r.Category != provider.Uncertain {
			t.Fatalf("recipient %d = %+v, want %q: the request went out", i, r, provider.Uncertain)
		}
	}
	wantDeliveries(t, f.Mock, account, n)
}

func testRepeatedKey(t *testing.T, a Adapter) {
	f := a.New(t)
	account := a.account("acct-again")
	req := a.request(account, "u1")
	for i := range 2 {
		if r := send(t, f.Provider, req)[0]; !r.Accepted {
			t.Fatalf("send %d: %+v, want accepted", i+1, r)
		}
	}
	want := 2 * len(req.To)
	if a.IdempotentKeys {
		want = len(req.To)
	}
	wantDeliveries(t, f.Mock, account, want)
}

func testStatus(t *testing.T, a Adapter) {
	f := a.New(t)
	account := a.account("acct-status")
	req := a.request(account, "u1")
	r := send(t, f.Provider, req)[0]
	if !r.Accepted {
		t.Fatalf("send: %+v, want accepted", r)
	}
	ctx := context.Background()
	if a.StatusByMsgID {
		got, err := f.Provider.Status(ctx, provider.StatusRequest{Account: account, Key: req.Keys[0], MsgID: r.MsgID})
		if err != nil || got != provider.StatusDelivered {
			t.Fatalf("Status(sent msg id %s) = %q, %v; want %q", r.MsgID, got, err, provider.StatusDelivered)
		}
		got, err = f.Provider.Status(ctx, provider.StatusRequest{Account: account, Key: req.Keys[0]})
		if !errors.Is(err, provider.ErrStatusUnsupported) {
			t.Fatalf("Status without a msg id = %q, %v; want provider.ErrStatusUnsupported", got, err)
		}
		return
	}
	got, err := f.Provider.Status(ctx, provider.StatusRequest{Account: account, Key: req.Keys[0]})
	if !a.StatusLookup {
		if !errors.Is(err, provider.ErrStatusUnsupported) {
			t.Fatalf("Status = %q, %v; want provider.ErrStatusUnsupported", got, err)
		}
		return
	}
	if err != nil || got != provider.StatusDelivered {
		t.Fatalf("Status(sent key) = %q, %v; want %q", got, err, provider.StatusDelivered)
	}
	got, err = f.Provider.Status(ctx, provider.StatusRequest{Account: account, Key: account + "-never-sent"})
	if err != nil || got != provider.StatusUnknown {
		t.Fatalf("Status(unsent key) = %q, %v; want %q", got, err, provider.StatusUnknown)
	}
}
