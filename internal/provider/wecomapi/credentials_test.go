package wecomapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/credcache"
	"github.com/qunfa/qunfa/internal/store"
)

// vault is a secret store: tenant → token ("" the default), with a
// failure switch and a count of reads.
type vault struct {
	mu     sync.Mutex
	tokens map[string]string
	err    error
	reads  int
}

func (v *vault) Token(_ context.Context, tenant string) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.reads++
	if v.err != nil {
		return "", v.err
	}
	if tok, ok := v.tokens[tenant]; ok {
		return tok, nil
	}
	if tok, ok := v.tokens[""]; ok {
		return tok, nil
	}
	return "", provider.ErrNoCredentials
}
func (v *vault) Invalidate(context.Context, string, string) {}
func (v *vault) set(tenant, tok string)                     { v.mu.Lock(); v.tokens[tenant] = tok; v.mu.Unlock() }

// owners is the store's AccountOwner, counted.
type owners struct {
	mu      sync.Mutex
	m       map[string]string
	lookups int
}

func (o *owners) AccountOwner(_ context.Context, account string) (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lookups++
	if t, ok := o.m[account]; ok {
		return t, nil
	}
	return "", store.ErrNotFound
}

// authProvider accepts a call when its bearer token is the one it holds
// for the account, and answers 42001 otherwise, as WeCom does for an
// expired token; it records the tokens it saw.
type authProvider struct {
	mu     sync.Mutex
	accept map[string]string // account → token
	seen   []string
}

func (p *authProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		GUID string `json:"guid"`
	}
	account := r.URL.Query().Get("guid")
	if r.Method == http.MethodPost {
		_ = json.NewDecoder(r.Body).Decode(&body)
		account = body.GUID
	}
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	p.mu.Lock()
	p.seen = append(p.seen, account+":"+tok)
	ok := p.accept[account] == tok
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case !ok:
		_, _ = w.Write([]byte(`{"errcode":42001,"errmsg":"access_token expired"}`))
	case r.Method == http.MethodGet:
		_, _ = w.Write([]byte(`{"errcode":0,"status":"delivered"}`))
	default:
		_, _ = w.Write([]byte(`{"errcode":0,"errmsg":"ok","msgid":"m1"}`))
	}
}

func (p *authProvider) calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

type credFixture struct {
	client *Client
	prov   *authProvider
	vault  *vault
	owners *owners
	clock  *clock.Fake
	logs   *bytes.Buffer
}

func newCredFixture(t *testing.T) *credFixture {
	t.Helper()
	f := &credFixture{
		prov:   &authProvider{accept: map[string]string{"acct-a": "tok-a1", "acct-b": "tok-b1", "acct-free": "tok-default"}},
		vault:  &vault{tokens: map[string]string{"tenant-a": "tok-a1", "tenant-b": "tok-b1", "": "tok-default"}},
		owners: &owners{m: map[string]string{"acct-a": "tenant-a", "acct-b": "tenant-b"}},
		clock:  clock.NewFake(time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)),
		logs:   &bytes.Buffer{},
	}
	srv := httptest.NewServer(f.prov)
	t.Cleanup(srv.Close)
	log := slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := New(Config{BaseURL: srv.URL, Logger: log, Clock: f.clock, Owners: f.owners,
		Credentials: credcache.New(f.vault, credcache.Options{Clock: f.clock, Log: log})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	t.Cleanup(func() {
		if strings.Contains(f.logs.String(), "tok-") {
			t.Errorf("a provider token was logged:\n%s", f.logs.String())
		}
	})
	f.client = c
	return f
}

func (f *credFixture) send(t *testing.T, account string) provider.RecipientResult {
	t.Helper()
	res, err := f.client.Send(context.Background(), provider.SendRequest{Account: account, Keys: []string{"k"}, To: []string{"u"}, Content: "hi"})
	if err != nil || len(res.Recipients) != 1 {
		t.Fatalf("send: %v %+v", err, res)
	}
	return res.Recipients[0]
}

func TestEachTenantsAccountsSendWithItsOwnToken(t *testing.T) {
	f := newCredFixture(t)
	for _, acct := range []string{"acct-a", "acct-b", "acct-free", "acct-a", "acct-b"} {
		if r := f.send(t, acct); !r.Accepted {
			t.Fatalf("%s: %+v", acct, r)
		}
	}
	want := []string{"acct-a:tok-a1", "acct-b:tok-b1", "acct-free:tok-default", "acct-a:tok-a1", "acct-b:tok-b1"}
	if got := f.prov.calls(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("calls %v, want %v", got, want)
	}
	// Secrets and owners are read once per tenant and account, not per call.
	if f.vault.reads != 3 || f.owners.lookups != 3 {
		t.Errorf("%d secret reads, %d owner look-ups; want 3 and 3", f.vault.reads, f.owners.lookups)
	}
	if st, err := f.client.Status(context.Background(), provider.StatusRequest{Account: "acct-b", Key: "k"}); err != nil || st != provider.StatusDelivered {
		t.Errorf("status with tenant-b's token: %v, %v", st, err)
	}
}

// Rotation: the secret and the provider move to a new token; the first
// call with the cached old one is refused (42001), the cache re-reads the
// secret at once, and the same Send goes out again with the new token and
// is accepted — no redeploy, no account_down.
func TestRotatedTokenIsReadAgainOnAuthError(t *testing.T) {
	f := newCredFixture(t)
	if r := f.send(t, "acct-a"); !r.Accepted {
		t.Fatal(r)
	}
	f.vault.set("tenant-a", "tok-a2")
	f.prov.mu.Lock()
	f.prov.accept["acct-a"] = "tok-a2"
	f.prov.mu.Unlock()
	if r := f.send(t, "acct-a"); !r.Accepted {
		t.Fatalf("after rotation: %+v, want accepted", r)
	}
	if r := f.send(t, "acct-a"); !r.Accepted {
		t.Fatalf("after rotation, again: %+v", r)
	}
	want := "acct-a:tok-a1 acct-a:tok-a1 acct-a:tok-a2 acct-a:tok-a2"
	if got := strings.Join(f.prov.calls(), " "); got != want {
		t.Errorf("calls %s, want %s", got, want)
	}
	// tenant-b's cached token was not touched by tenant-a's rotation.
	if r := f.send(t, "acct-b"); !r.Accepted {
		t.Fatal(r)
	}
	if f.vault.reads != 3 {
		t.Errorf("secret reads = %d, want 3 (tenant-a twice, tenant-b once)", f.vault.reads)
	}
}

// A token that is simply wrong: refused, re-read, the same: one call only,
// account_down as before.
func TestWrongTokenIsAccountDownWithoutASecondCall(t *testing.T) {
	f := newCredFixture(t)
	f.prov.mu.Lock()
	f.prov.accept["acct-a"] = "something-else"
	f.prov.mu.Unlock()
	if r := f.send(t, "acct-a"); r.Category != provider.AccountDown || r.Code != "42001" {
		t.Fatalf("result %+v, want account_down 42001", r)
	}
	if n := len(f.prov.calls()); n != 1 {
		t.Errorf("%d provider calls, want 1", n)
	}
}

// Unreadable credentials: nothing is sent, the items are retryable.
func TestUnreadableCredentialsSendNothing(t *testing.T) {
	f := newCredFixture(t)
	f.vault.err = errors.New("AccessDeniedException: not authorized")
	if r := f.send(t, "acct-a"); r.Category != provider.Retryable || strings.Contains(r.Message, "Denied") {
		t.Fatalf("result %+v, want retryable without the store's error", r)
	}
	if n := len(f.prov.calls()); n != 0 {
		t.Errorf("%d provider calls, want none", n)
	}
	if _, err := f.client.Status(context.Background(), provider.StatusRequest{Account: "acct-a", Key: "k"}); err == nil {
		t.Error("Status without credentials: no error")
	}
	if !strings.Contains(f.logs.String(), "credentials unavailable") {
		t.Errorf("not logged: %s", f.logs.String())
	}
}

// An account nobody owned uses the default token; once granted, its
// owner's token within ownerMissTTL.
func TestGrantReachesTheSenderWithinAMinute(t *testing.T) {
	f := newCredFixture(t)
	f.prov.mu.Lock()
	f.prov.accept["acct-new"] = "tok-default"
	f.prov.mu.Unlock()
	if r := f.send(t, "acct-new"); !r.Accepted {
		t.Fatal(r)
	}
	f.owners.mu.Lock()
	f.owners.m["acct-new"] = "tenant-b"
	f.owners.mu.Unlock()
	f.prov.mu.Lock()
	f.prov.accept["acct-new"] = "tok-b1"
	f.prov.mu.Unlock()
	f.clock.Advance(ownerMissTTL - time.Second)
	f.send(t, "acct-new") // still the default: refused
	f.clock.Advance(time.Second)
	if r := f.send(t, "acct-new"); !r.Accepted {
		t.Fatalf("after the grant: %+v", r)
	}
}
