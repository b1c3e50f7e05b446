package wecomapi

import (
	"context"
	"net"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/credcache"
	"github.com/qunfa/qunfa/internal/provider/providertest"
)

// wecomapiCodes are the errcodes of the wecomapi protocol (DESIGN.md "the
// mock provider" and WeCom's global error codes) and what each means.
var wecomapiCodes = []providertest.Code{
	{Code: "-1", Category: provider.Retryable},
	{Code: "40001", Category: provider.AccountDown},
	{Code: "40003", Category: provider.Permanent},
	{Code: "40008", Category: provider.Permanent},
	{Code: "40014", Category: provider.AccountDown},
	{Code: "40058", Category: provider.Permanent},
	{Code: "41001", Category: provider.AccountDown},
	{Code: "42001", Category: provider.AccountDown},
	{Code: "44004", Category: provider.Permanent},
	{Code: "45002", Category: provider.Permanent},
	{Code: "45009", Category: provider.RateLimited},
	{Code: "45033", Category: provider.RateLimited},
	{Code: "47001", Category: provider.Permanent},
	{Code: "48002", Category: provider.Permanent},
	{Code: "60011", Category: provider.Permanent},
	{Code: "60111", Category: provider.Permanent},
	{Code: "81010", Category: provider.Permanent},
	{Code: "81013", Category: provider.Permanent},
	{Code: "86008", Category: provider.Permanent},
	// A code the protocol does not document: refused, so not delivered;
	// retried within the attempt budget.
	{Code: "99999", Category: provider.Retryable},
}

func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Adapter{
		New:          func(t *testing.T) providertest.Fixture { return newConformanceFixture(t, true) },
		Codes:        wecomapiCodes,
		MaxPerCall:   100,
		StatusLookup: true,
	})
}

// TestConformanceWithoutLookup runs the suite against the mock mode whose
// accounts answer no status look-up (status_lookup false).
func TestConformanceWithoutLookup(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Adapter{
		New:        func(t *testing.T) providertest.Fixture { return newConformanceFixture(t, false) },
		Codes:      wecomapiCodes,
		MaxPerCall: 100,
	})
}

// secret is the backing store of the tenant's provider token: what an
// operator rotates.
type secret struct {
	mu    sync.Mutex
	token string
}

func (s *secret) Token(context.Context, string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token, nil
}

func (s *secret) Invalidate(context.Context, string, string) {}

func (s *secret) set(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = tok
}

// conformanceMock drives the wecomapi mock for the suite.
type conformanceMock struct {
	mock   *mockprovider.Mock
	secret *secret
	lookup bool
}

func newConformanceFixture(t *testing.T, lookup bool) providertest.Fixture {
	m, err := mockprovider.New(mockprovider.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = m.Close() })
	sec := &secret{token: "tok-1"}
	creds := credcache.New(sec, credcache.Options{Clock: clock.NewFake(time.Unix(1_700_000_000, 0)), Log: quiet})
	cfg := Config{Credentials: creds, ResponseTimeout: 200 * time.Millisecond, ConnectTimeout: 200 * time.Millisecond}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	_ = ln.Close()
	cm := &conformanceMock{mock: m, secret: sec, lookup: lookup}
	return providertest.Fixture{
		Provider:    &lookupPerAccount{Client: newClient(t, srv.URL, cfg), mock: cm},
		Unreachable: newClient(t, closed, cfg),
		Mock:        cm,
	}
}

// lookupPerAccount applies the fixture's status_lookup mode to an
// account before its first call, as an operator configures the mock.
type lookupPerAccount struct {
	*Client
	mock *conformanceMock
}

func (l *lookupPerAccount) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	l.mock.ensure(req.Account)
	return l.Client.Send(ctx, req)
}

func (l *lookupPerAccount) Status(ctx context.Context, req provider.StatusRequest) (provider.Status, error) {
	l.mock.ensure(req.Account)
	return l.Client.Status(ctx, req)
}

func (c *conformanceMock) ensure(account string) {
	if c.lookup {
		return
	}
	b := c.mock.Behaviour(account)
	if b.StatusLookup == nil {
		off := false
		b.StatusLookup = &off
		_ = c.mock.SetBehaviour(account, b)
	}
}

func (c *conformanceMock) change(t *testing.T, account string, f func(*mockprovider.Behaviour)) {
	t.Helper()
	c.ensure(account)
	b := c.mock.Behaviour(account)
	f(&b)
	if err := c.mock.SetBehaviour(account, b); err != nil {
		t.Fatal(err)
	}
}

func (c *conformanceMock) Deliveries(account string) int {
	return int(c.mock.Stats()[account].Accepted)
}

func (c *conformanceMock) Refuse(t *testing.T, account, code string) {
	t.Helper()
	n, err := strconv.Atoi(code)
	if err != nil {
		t.Fatalf("wecomapi codes are numbers: %q", code)
	}
	c.change(t, account, func(b *mockprovider.Behaviour) { b.Errors = []mockprovider.InjectedError{{Errcode: n, Ratio: 1}} })
}

func (c *conformanceMock) InvalidRecipient(t *testing.T, account, to string) {
	t.Helper()
	c.change(t, account, func(b *mockprovider.Behaviour) { b.InvalidToIDs = append(b.InvalidToIDs, to) })
}

func (c *conformanceMock) HoldAnswers(t *testing.T, account string) {
	t.Helper()
	c.change(t, account, func(b *mockprovider.Behaviour) { b.TimeoutRatio = 1 })
}

// ExpireCredential makes the account take only a new token; renewable
// puts that token in the secret (a rotation the cached adapter has not
// seen yet), else the secret keeps the refused one.
func (c *conformanceMock) ExpireCredential(t *testing.T, account string, renewable bool) {
	t.Helper()
	c.change(t, account, func(b *mockprovider.Behaviour) { b.Token = "tok-2" })
	if renewable {
		c.secret.set("tok-2")
	}
}
