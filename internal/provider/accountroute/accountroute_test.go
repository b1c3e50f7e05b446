package accountroute

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
)

// recorder is an adapter that accepts everything and counts its calls.
type recorder struct {
	mu       sync.Mutex
	sends    int
	statuses int
}

func (r *recorder) Send(_ context.Context, req provider.SendRequest) (provider.SendResult, error) {
	r.mu.Lock()
	r.sends++
	r.mu.Unlock()
	return same(len(req.To), provider.RecipientResult{Accepted: true, MsgID: "m"}), nil
}

func (r *recorder) Status(context.Context, provider.StatusRequest) (provider.Status, error) {
	r.mu.Lock()
	r.statuses++
	r.mu.Unlock()
	return provider.StatusDelivered, nil
}

func (r *recorder) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sends, r.statuses
}

type fixture struct {
	st     *sqlitestore.Store
	clk    *clock.Fake
	router *Router
	api    *recorder // wecomapi
	app    *recorder // wecom-app
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f := &fixture{st: st, clk: clock.NewFake(time.Unix(1_700_000_000, 0)), api: &recorder{}, app: &recorder{}}
	f.router, err = New(Config{Accounts: st, Clock: f.clk, Logger: slog.New(slog.DiscardHandler),
		Adapters: map[provider.Kind]provider.Provider{provider.KindWecomAPI: f.api, provider.KindWecomApp: f.app}})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) put(t *testing.T, a store.Account) {
	t.Helper()
	ctx := t.Context()
	if a.Tenant == "" {
		a.Tenant = "tenant-a"
	}
	if err := f.st.GrantAccount(ctx, a.Tenant, a.ID, f.clk.Now()); err != nil {
		t.Fatal(err)
	}
	a.RatePerSec, a.Burst, a.MaxRecipientsPerCall = 10, 10, 1
	if _, err := f.st.PutAccount(ctx, a); err != nil {
		t.Fatal(err)
	}
}

func req(account string, to ...string) provider.SendRequest {
	return provider.SendRequest{Account: account, To: to, Keys: to, Content: "hi"}
}

func TestSendGoesThroughTheAccountsProvider(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.put(t, store.Account{ID: "on-app", Provider: "wecom-app"})
	f.put(t, store.Account{ID: "on-api"})
	for _, account := range []string{"on-app", "on-api", "nobody-owns-it"} {
		if res, err := f.router.Send(t.Context(), req(account, "u1")); err != nil || !res.Recipients[0].Accepted {
			t.Fatalf("Send(%s) = %+v, %v", account, res, err)
		}
	}
	if api, _ := f.api.counts(); api != 2 {
		t.Errorf("wecomapi got %d calls, want 2 (the default account and the unowned one)", api)
	}
	if app, _ := f.app.counts(); app != 1 {
		t.Errorf("wecom-app got %d calls, want 1", app)
	}
}

func TestAccountWithoutLookupIsNeverLookedUp(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.put(t, store.Account{ID: "no-lookup", NoStatusLookup: true})
	f.put(t, store.Account{ID: "lookup"})
	_, err := f.router.Status(t.Context(), provider.StatusRequest{Account: "no-lookup", Key: "j:1"})
	if !errors.Is(err, provider.ErrStatusUnsupported) {
		t.Fatalf("Status(no-lookup) error = %v, want ErrStatusUnsupported", err)
	}
	if st, err := f.router.Status(t.Context(), provider.StatusRequest{Account: "lookup", Key: "j:1"}); err != nil || st != provider.StatusDelivered {
		t.Fatalf("Status(lookup) = %q, %v", st, err)
	}
	if _, statuses := f.api.counts(); statuses != 1 {
		t.Fatalf("the adapter was asked %d times, want once (only the account with a look-up)", statuses)
	}
}

func TestProviderWithoutAdapterIsAccountDown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.put(t, store.Account{ID: "on-http", Provider: "http"})
	res, err := f.router.Send(t.Context(), req("on-http", "u1", "u2"))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res.Recipients {
		if r.Accepted || r.Category != provider.AccountDown {
			t.Errorf("recipient %d = %+v, want account_down", i, r)
		}
	}
	if api, _ := f.api.counts(); api != 0 {
		t.Fatalf("a call went out through wecomapi instead")
	}
}

func TestCallOverTheProvidersLimitIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.put(t, store.Account{ID: "tmpl", Provider: "wechat-mp-template"})
	f.router.cfg.Adapters[provider.KindWechatMPTemplate] = f.app
	if _, err := f.router.Send(t.Context(), req("tmpl", "u1", "u2")); !errors.Is(err, ErrTooManyRecipients) {
		t.Fatalf("Send(2 recipients on a one-per-call provider) error = %v, want ErrTooManyRecipients", err)
	}
	if app, _ := f.app.counts(); app != 0 {
		t.Fatal("the call went out")
	}
}

func TestChangedProviderAppliesAfterTheTTL(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.put(t, store.Account{ID: "moving"})
	send := func() {
		t.Helper()
		if _, err := f.router.Send(t.Context(), req("moving", "u1")); err != nil {
			t.Fatal(err)
		}
	}
	send()
	f.put(t, store.Account{ID: "moving", Provider: "wecom-app"})
	send()
	if app, _ := f.app.counts(); app != 0 {
		t.Fatal("the change applied before the TTL")
	}
	f.clk.Advance(31 * time.Second)
	send()
	if api, _ := f.api.counts(); api != 2 {
		t.Fatalf("wecomapi got %d calls, want 2", api)
	}
	if app, _ := f.app.counts(); app != 1 {
		t.Fatalf("wecom-app got %d calls after the TTL, want 1", app)
	}
}
