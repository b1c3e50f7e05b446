package wecomapp

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/httpcall"
	"github.com/qunfa/qunfa/internal/provider/providertest"
)

var quiet = slog.New(slog.DiscardHandler)

// account is the suite's name as a WeCom application: its own corp.
func account(name string) string { return "ww-" + name + ":1000002" }

func corpOf(t *testing.T, account string) string {
	t.Helper()
	corp, _, err := ParseAccount(account)
	if err != nil {
		t.Fatal(err)
	}
	return corp
}

func TestConformance(t *testing.T) {
	t.Parallel()
	codes := make([]providertest.Code, 0, len(Codes)+1)
	for code, cat := range Codes {
		codes = append(codes, providertest.Code{Code: strconv.Itoa(code), Category: cat})
	}
	// A code WeCom does not document: refused, so not delivered; retried
	// within the attempt budget.
	codes = append(codes, providertest.Code{Code: "99999", Category: provider.Retryable})
	providertest.Run(t, providertest.Adapter{
		New:        func(t *testing.T) providertest.Fixture { return newFixture(t).fixture },
		Codes:      codes,
		MaxPerCall: MaxPerCall,
		Account:    account,
	})
}

type fixture struct {
	fixture  providertest.Fixture
	mock     *mockprovider.Mock
	client   *Client
	gettoken *atomic.Int64
}

// secret is the tenant's application secret as an operator rotates it.
type secret struct {
	mu sync.Mutex
	s  string
}

func (s *secret) Token(context.Context, string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.s, nil
}
func (s *secret) Invalidate(context.Context, string, string) {}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	m, err := mockprovider.New(mockprovider.Config{Protocol: mockprovider.ProtocolWecomApp,
		MemberLimitPerMin: mockprovider.WecomAppMemberLimitPerMin, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var gettoken atomic.Int64
	h := m.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/cgi-bin/gettoken" {
			gettoken.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = m.Close() })
	cfg := Config{Credentials: &secret{s: "secret-1"}, Timeouts: httpcall.Timeouts{Connect: 200 * time.Millisecond, Response: 200 * time.Millisecond}, Logger: quiet}
	newClient := func(base string) *Client {
		cfg.BaseURL = base
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c := newClient(srv.URL)
	return &fixture{
		fixture: providertest.Fixture{Provider: c, Unreachable: newClient(providertest.ClosedURL(t)),
			Mock: &providertest.MockProvider{Mock: m, App: corpOf}},
		mock: m, client: c, gettoken: &gettoken,
	}
}

func send(t *testing.T, c *Client, req provider.SendRequest) []provider.RecipientResult {
	t.Helper()
	res, err := c.Send(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res.Recipients
}

func TestAccessTokenIsCachedForItsLifetime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acct := account("cache")
	for i := range 3 {
		if r := send(t, f.client, provider.SendRequest{Account: acct, To: []string{"u" + strconv.Itoa(i)}, Keys: []string{"k"}, Content: "hi"})[0]; !r.Accepted {
			t.Fatalf("send %d: %+v", i, r)
		}
	}
	if n := f.gettoken.Load(); n != 1 {
		t.Fatalf("gettoken called %d times for 3 sends, want 1", n)
	}
	f.mock.ExpireAccessTokens(corpOf(t, acct))
	if r := send(t, f.client, provider.SendRequest{Account: acct, To: []string{"u9"}, Keys: []string{"k"}, Content: "hi"})[0]; !r.Accepted {
		t.Fatalf("send after expiry: %+v", r)
	}
	if n := f.gettoken.Load(); n != 2 {
		t.Fatalf("gettoken called %d times, want 2 (one refresh on 42001)", n)
	}
}

func TestMemberOverItsLimitIsSilentlyDropped(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acct := account("member")
	to := make([]string, 31)
	for i := range to {
		to[i] = "same-member"
	}
	// One member sent to 31 times in a minute (31 calls): WeCom answers ok
	// to every one and delivers 30.
	for i := range 31 {
		if r := send(t, f.client, provider.SendRequest{Account: acct, To: to[:1], Keys: []string{"k" + strconv.Itoa(i)}, Content: "hi"})[0]; !r.Accepted {
			t.Fatalf("send %d: %+v, want accepted (the drop is silent)", i, r)
		}
	}
	st := f.mock.Stats()[acct]
	if st.Accepted != 30 || st.Dropped != 1 {
		t.Fatalf("mock: %d delivered, %d dropped; want 30 and 1", st.Accepted, st.Dropped)
	}
}

func TestTouserIsJoinedAndInvalidUsersListed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acct := account("join")
	if err := f.mock.SetBehaviour(acct, mockprovider.Behaviour{InvalidToIDs: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	rs := send(t, f.client, provider.SendRequest{Account: acct, To: []string{"a", "b", "c"}, Keys: []string{"1", "2", "3"}, Content: "hi"})
	if !rs[0].Accepted || rs[1].Accepted || rs[1].Code != "invaliduser" || !rs[2].Accepted || rs[0].MsgID == "" || rs[0].MsgID != rs[2].MsgID {
		t.Fatalf("results %+v: want a and c accepted with the call's msgid, b refused as invaliduser", rs)
	}
	res, err := f.client.Send(context.Background(), provider.SendRequest{Account: "no-agent", To: []string{"a"}, Keys: []string{"1"}, Content: "hi"})
	if err == nil {
		t.Fatalf("Send to an account that is not <corpid>:<agentid> = %+v, want ErrInvalidRequest", res)
	}
}

// secrets is a cached Credentials of names to secrets (ErrNoCredentials
// for any other): a rotated secret is served once the old one is
// invalidated, which it records.
type secrets struct {
	mu          sync.Mutex
	by, rotated map[string]string
	invalidated []string
}

func (s *secrets) Token(_ context.Context, name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.by[name]; ok {
		return v, nil
	}
	return "", provider.ErrNoCredentials
}

func (s *secrets) Invalidate(_ context.Context, name, _ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.invalidated = append(s.invalidated, name)
	if v, ok := s.rotated[name]; ok {
		s.by[name] = v
	}
}

// An application with its own secret sends with it; the other
// applications of the tenant send with the tenant's; a rotated own
// secret is read again from the account's credentials.
func TestAccountSecretBeforeTenantSecret(t *testing.T) {
	t.Parallel()
	m, err := mockprovider.New(mockprovider.Config{Protocol: mockprovider.ProtocolWecomApp, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	own, other := account("own"), account("other")
	for corp, want := range map[string]string{corpOf(t, own): "app-secret", corpOf(t, other): "tenant-secret"} {
		if err := m.SetBehaviour(corp, mockprovider.Behaviour{Token: want}); err != nil {
			t.Fatal(err)
		}
	}
	accounts := &secrets{by: map[string]string{"ww-own.1000002": "app-secret"}, rotated: map[string]string{"ww-own.1000002": "app-secret-2"}}
	tenants := &secrets{by: map[string]string{"": "tenant-secret"}}
	c, err := New(Config{BaseURL: srv.URL, AccountCredentials: accounts, Credentials: tenants, Logger: quiet,
		Timeouts: httpcall.Timeouts{Connect: time.Second, Response: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for _, acct := range []string{own, other} {
		if r := send(t, c, provider.SendRequest{Account: acct, To: []string{"u1"}, Keys: []string{"k"}, Content: "hi"})[0]; !r.Accepted {
			t.Fatalf("%s: %+v, want accepted with its own or its tenant's secret", acct, r)
		}
	}

	// The application's secret is rotated: gettoken refuses the cached
	// one, the account's credential is invalidated and read again.
	if err := m.SetBehaviour(corpOf(t, own), mockprovider.Behaviour{Token: "app-secret-2"}); err != nil {
		t.Fatal(err)
	}
	m.ExpireAccessTokens(corpOf(t, own))
	if r := send(t, c, provider.SendRequest{Account: own, To: []string{"u2"}, Keys: []string{"k"}, Content: "hi"})[0]; !r.Accepted {
		t.Fatalf("after rotation: %+v", r)
	}
	if len(accounts.invalidated) != 1 || accounts.invalidated[0] != "ww-own.1000002" || len(tenants.invalidated) != 0 {
		t.Fatalf("invalidated accounts %v tenants %v, want the account's secret only", accounts.invalidated, tenants.invalidated)
	}
}
