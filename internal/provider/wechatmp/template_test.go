package wechatmp

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/httpcall"
	"github.com/qunfa/qunfa/internal/provider/providertest"
)

var quiet = slog.New(slog.DiscardHandler)

// templateAccount is the suite's name as an Official Account's template.
func templateAccount(name string) string { return "wx-" + name + ":tmpl-notice" }

type templateFixture struct {
	mock    *mockprovider.Mock
	adapter *Template
	tokens  *atomic.Int64
	fixture providertest.Fixture
}

func newTemplateFixture(t *testing.T) *templateFixture {
	t.Helper()
	m, err := mockprovider.New(mockprovider.Config{Protocol: mockprovider.ProtocolWechatMP, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var tokens atomic.Int64
	h := m.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/cgi-bin/token" {
			tokens.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = m.Close() })
	build := func(base string) *Template {
		a, err := NewTemplate(Config{BaseURL: base, Secret: "app-secret", Logger: quiet,
			Timeouts: httpcall.Timeouts{Connect: 200 * time.Millisecond, Response: 200 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close() })
		return a
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	_ = ln.Close()
	a := build(srv.URL)
	return &templateFixture{mock: m, adapter: a, tokens: &tokens,
		fixture: providertest.Fixture{Provider: a, Unreachable: build(closed), Mock: &templateDriver{mock: m}}}
}

func TestTemplateConformance(t *testing.T) {
	t.Parallel()
	codes := []providertest.Code{{Code: "99999", Category: provider.Retryable}}
	for code, cat := range Codes {
		codes = append(codes, providertest.Code{Code: strconv.Itoa(code), Category: cat})
	}
	providertest.Run(t, providertest.Adapter{
		New:        func(t *testing.T) providertest.Fixture { return newTemplateFixture(t).fixture },
		Codes:      codes,
		MaxPerCall: provider.KindWechatMPTemplate.MaxPerCall(),
		Account:    templateAccount,
	})
}

type templateDriver struct {
	mock *mockprovider.Mock
	// mass: the account is the appid itself.
	mass bool
}

func (d *templateDriver) change(t *testing.T, guid string, f func(*mockprovider.Behaviour)) {
	t.Helper()
	b := d.mock.Behaviour(guid)
	f(&b)
	if err := d.mock.SetBehaviour(guid, b); err != nil {
		t.Fatal(err)
	}
}

func (d *templateDriver) Deliveries(account string) int { return int(d.mock.Stats()[account].Accepted) }

func (d *templateDriver) Refuse(t *testing.T, account, code string) {
	n, err := strconv.Atoi(code)
	if err != nil {
		t.Fatal(err)
	}
	d.change(t, account, func(b *mockprovider.Behaviour) { b.Errors = []mockprovider.InjectedError{{Errcode: n, Ratio: 1}} })
}

func (d *templateDriver) InvalidRecipient(t *testing.T, account, to string) {
	d.change(t, account, func(b *mockprovider.Behaviour) { b.InvalidToIDs = append(b.InvalidToIDs, to) })
}

func (d *templateDriver) HoldAnswers(t *testing.T, account string) {
	d.change(t, account, func(b *mockprovider.Behaviour) { b.TimeoutRatio = 1 })
}

// ExpireCredential ends the app's access tokens; without renewable the
// app also stops taking the AppSecret the adapter holds.
func (d *templateDriver) ExpireCredential(t *testing.T, account string, renewable bool) {
	app := account
	if !d.mass {
		var err error
		if app, _, err = ParseTemplateAccount(account); err != nil {
			t.Fatal(err)
		}
	}
	if !renewable {
		d.change(t, app, func(b *mockprovider.Behaviour) { b.Token = "secret-reset-in-the-console" })
	}
	d.mock.ExpireAccessTokens(app)
}

func TestTemplateTokenIsCachedAndQuotaIsRateLimited(t *testing.T) {
	t.Parallel()
	f := newTemplateFixture(t)
	acct := templateAccount("quota")
	send := func(to string) provider.RecipientResult {
		t.Helper()
		res, err := f.adapter.Send(context.Background(), provider.SendRequest{Account: acct, To: []string{to}, Keys: []string{to}, Content: "您的订单已发货"})
		if err != nil {
			t.Fatal(err)
		}
		return res.Recipients[0]
	}
	// The daily quota: two messages, then 45009.
	if err := f.mock.SetBehaviour(acct, mockprovider.Behaviour{RatePerSec: 1e-9, Burst: 2}); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{"openid-1", "openid-2"} {
		if r := send(to); !r.Accepted || r.MsgID == "" {
			t.Fatalf("send to %s: %+v, want accepted with a numeric msgid", to, r)
		}
	}
	if r := send("openid-3"); r.Accepted || r.Category != provider.RateLimited || r.Code != "45009" {
		t.Fatalf("over the daily quota: %+v, want rate_limited 45009", r)
	}
	if n := f.tokens.Load(); n != 1 {
		t.Fatalf("cgi-bin/token called %d times for 3 sends, want 1", n)
	}
	if _, err := f.adapter.Send(context.Background(), provider.SendRequest{Account: acct, To: []string{"a", "b"}, Keys: []string{"1", "2"}, Content: "x"}); err == nil {
		t.Fatal("two OpenIDs in one template call were sent")
	}
}
