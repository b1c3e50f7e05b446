package wechatmp

import (
	"context"
	"log/slog"
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
	a := build(srv.URL)
	return &templateFixture{mock: m, adapter: a, tokens: &tokens,
		fixture: providertest.Fixture{Provider: a, Unreachable: build(providertest.ClosedURL(t)),
			Mock: &providertest.MockProvider{Mock: m, App: templateApp}}}
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

// templateApp is the appid of a template account, whose access tokens
// and AppSecret its calls use.
func templateApp(t *testing.T, account string) string {
	t.Helper()
	app, _, err := ParseTemplateAccount(account)
	if err != nil {
		t.Fatal(err)
	}
	return app
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
		if r := send(to); !r.Accepted || r.MsgID == "" || !r.AwaitConfirm || r.EventAccount != "wx-quota" {
			t.Fatalf("send to %s: %+v, want accepted with a numeric msgid, awaiting TEMPLATESENDJOBFINISH for app wx-quota", to, r)
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
