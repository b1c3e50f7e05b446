// Package accountroute is a provider.Provider that sends each call, and
// makes each status look-up, through the adapter of the provider its
// account names (store.Account.Provider). The sender and the reconciler
// keep one Provider; which API an account speaks is the account's
// configuration, read from the store and cached briefly.
//
// An account whose provider has no status look-up (a wecomapi account
// with "status_lookup": false, or a provider kind without one) answers
// provider.ErrStatusUnsupported without a call: the reconciler puts its
// unanswered items under review, never resends them.
package accountroute

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/store"
)

var _ provider.Provider = (*Router)(nil)

// ErrTooManyRecipients is returned by Send for a call carrying more
// recipients than its account's provider takes in one call; nothing was
// sent.
var ErrTooManyRecipients = errors.New("accountroute: more recipients than the provider takes in one call")

// Accounts reads account configuration (store.Store has both methods).
type Accounts interface {
	// AccountOwner returns the tenant owning a provider account
	// (store.ErrNotFound when nobody does).
	AccountOwner(ctx context.Context, account string) (string, error)
	// GetAccount reads a tenant's account (store.ErrNotFound if unknown).
	GetAccount(ctx context.Context, tenant, account string) (store.Account, error)
}

// Config configures a Router.
type Config struct {
	// Accounts gives each account's provider.
	Accounts Accounts
	// Adapters holds the adapter of every provider kind the deployment
	// reaches. An account naming a kind without one fails every call as
	// AccountDown (nothing is sent; its breaker opens for an operator).
	Adapters map[provider.Kind]provider.Provider
	// TTL is how long an account's provider is trusted before it is read
	// again (default 30 s; the sender trusts its limits as long).
	TTL time.Duration
	// Clock times the cache (default: the system clock).
	Clock clock.Clock
	// Logger receives failures (default: slog.Default()).
	Logger *slog.Logger
}

// Router dispatches calls by their account's provider. It is safe for
// concurrent use.
type Router struct {
	cfg Config

	mu     sync.Mutex
	routes map[string]route
}

// route is what the router knows of one account.
type route struct {
	kind     provider.Kind
	noLookup bool
	account  store.Account
	readAt   time.Time
}

// AccountSender is an adapter whose calls need their account's
// configuration (the generic http provider): the router calls SendFor
// instead of Send.
type AccountSender interface {
	SendFor(ctx context.Context, a store.Account, req provider.SendRequest) (provider.SendResult, error)
}

// New builds a Router.
func New(cfg Config) (*Router, error) {
	if cfg.Accounts == nil {
		return nil, errors.New("accountroute: Accounts is required")
	}
	if len(cfg.Adapters) == 0 {
		return nil, errors.New("accountroute: no adapter")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Router{cfg: cfg, routes: map[string]route{}}, nil
}

// route returns the account's provider. An account nobody owns, or that
// its owner never configured, sends through wecomapi with a look-up.
func (r *Router) route(ctx context.Context, account string) (route, error) {
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	rt, ok := r.routes[account]
	r.mu.Unlock()
	if ok && now.Sub(rt.readAt) < r.cfg.TTL {
		return rt, nil
	}
	rt = route{kind: provider.KindWecomAPI, readAt: now}
	tenant, err := r.cfg.Accounts.AccountOwner(ctx, account)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return route{}, fmt.Errorf("owner of account %s: %w", account, err)
	default:
		a, err := r.cfg.Accounts.GetAccount(ctx, tenant, account)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return route{}, fmt.Errorf("read account %s: %w", account, err)
		default:
			rt.kind, rt.noLookup, rt.account = provider.KindOf(a.Provider), a.NoStatusLookup, a
		}
	}
	r.mu.Lock()
	r.routes[account] = rt
	r.mu.Unlock()
	return rt, nil
}

// Send sends req through its account's adapter (see provider.Provider).
func (r *Router) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	rt, err := r.route(ctx, req.Account)
	if err != nil {
		// Nothing went out: try again later.
		r.cfg.Logger.Warn("account's provider unreadable", slog.String("account", req.Account), slog.Any("err", err))
		return same(len(req.To), provider.RecipientResult{Category: provider.Retryable, Message: "account's provider unreadable"}), ctx.Err()
	}
	p, ok := r.cfg.Adapters[rt.kind]
	if !ok {
		return same(len(req.To), provider.RecipientResult{Category: provider.AccountDown,
			Message: fmt.Sprintf("this deployment reaches no %q provider", rt.kind)}), nil
	}
	if n := len(req.To); n > rt.kind.MaxPerCall() {
		return provider.SendResult{}, fmt.Errorf("%w: %d for %s (at most %d)", ErrTooManyRecipients, n, rt.kind, rt.kind.MaxPerCall())
	}
	if as, ok := p.(AccountSender); ok {
		return as.SendFor(ctx, rt.account, req)
	}
	return p.Send(ctx, req)
}

// Status looks req up through its account's adapter, or answers
// provider.ErrStatusUnsupported for an account without a look-up.
func (r *Router) Status(ctx context.Context, req provider.StatusRequest) (provider.Status, error) {
	rt, err := r.route(ctx, req.Account)
	if err != nil {
		return "", err
	}
	if rt.noLookup {
		return "", fmt.Errorf("account %s: %w", req.Account, provider.ErrStatusUnsupported)
	}
	p, ok := r.cfg.Adapters[rt.kind]
	if !ok {
		return "", fmt.Errorf("this deployment reaches no %q provider", rt.kind)
	}
	return p.Status(ctx, req)
}

func same(n int, rr provider.RecipientResult) provider.SendResult {
	out := make([]provider.RecipientResult, n)
	for i := range out {
		out[i] = rr
	}
	return provider.SendResult{Recipients: out}
}
