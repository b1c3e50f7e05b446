package wecomapi

import (
	"context"
	"net/http/httptest"
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

func newConformanceFixture(t *testing.T, lookup bool) providertest.Fixture {
	m, err := mockprovider.New(mockprovider.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = m.Close() })
	sec := providertest.NewSecret("tok-1")
	creds := credcache.New(sec, credcache.Options{Clock: clock.NewFake(time.Unix(1_700_000_000, 0)), Log: quiet})
	cfg := Config{Credentials: creds, ResponseTimeout: 200 * time.Millisecond, ConnectTimeout: 200 * time.Millisecond}
	mock := &providertest.MockProvider{Mock: m, Secret: sec}
	c := newClient(t, srv.URL, cfg)
	var p provider.Provider = c
	if !lookup {
		mock.Prepare = noLookup
		p = &lookupOff{Client: c, mock: m}
	}
	return providertest.Fixture{Provider: p, Unreachable: newClient(t, providertest.ClosedURL(t), cfg), Mock: mock}
}

// noLookup puts an account in the mock's mode without status look-up
// (status_lookup false), unless it was set otherwise.
func noLookup(b *mockprovider.Behaviour) {
	if b.StatusLookup == nil {
		off := false
		b.StatusLookup = &off
	}
}

// lookupOff puts an account in that mode before its first call, as an
// operator configures the mock.
type lookupOff struct {
	*Client
	mock *mockprovider.Mock
}

func (l *lookupOff) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	l.off(req.Account)
	return l.Client.Send(ctx, req)
}

func (l *lookupOff) Status(ctx context.Context, req provider.StatusRequest) (provider.Status, error) {
	l.off(req.Account)
	return l.Client.Status(ctx, req)
}

func (l *lookupOff) off(account string) {
	if b := l.mock.Behaviour(account); b.StatusLookup == nil {
		noLookup(&b)
		_ = l.mock.SetBehaviour(account, b)
	}
}
