// Package credcache is a caching decorator of the provider.Credentials
// port: a tenant's provider token is read from the backing store (Secrets
// Manager, files) at most once per TTL, re-read at once when the provider
// refuses it (Invalidate), and, while the backing store fails, the last
// good token keeps being served for a while instead of failing every send.
package credcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider"
)

var _ provider.Credentials = (*Cache)(nil)

// Options configure a Cache.
type Options struct {
	// TTL is how long a token read from the backing store is served
	// without reading it again (default 5 min): the longest a rotated
	// secret takes to reach a function whose calls still succeed.
	TTL time.Duration
	// MinRefresh bounds how often the backing store is read for a tenant
	// whose token the provider keeps refusing, and how long the last good
	// token is served before the next read after a failed one (default 5 s).
	MinRefresh time.Duration
	// Clock tells the time (default the system clock).
	Clock clock.Clock
	// Log receives a warning when a read fails (never a token).
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.TTL <= 0 {
		o.TTL = 5 * time.Minute
	}
	if o.MinRefresh <= 0 {
		o.MinRefresh = 5 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// Cache caches another Credentials per tenant. It is safe for concurrent
// use; concurrent Token calls for one tenant share one read.
type Cache struct {
	inner provider.Credentials
	opt   Options

	mu      sync.Mutex
	tenants map[string]*entry
}

// entry is one tenant's cached credential. Its mutex is held during a read
// of the backing store, so a tenant is read once however many calls wait.
type entry struct {
	mu      sync.Mutex
	held    bool      // a read succeeded (token, or none when empty)
	none    bool      // the read said ErrNoCredentials
	token   string    //
	readAt  time.Time // when the held answer was read
	stale   bool      // the provider refused the held token
	retryAt time.Time // after a failed read: serve the held token until then
	// recheckedAt is when the token was re-read because the provider had
	// refused it: refusals of the same token right after are not worth
	// another read.
	recheckedAt time.Time
}

// New wraps inner.
func New(inner provider.Credentials, opt Options) *Cache {
	return &Cache{inner: inner, opt: opt.withDefaults(), tenants: map[string]*entry{}}
}

func (c *Cache) entry(tenant string) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.tenants[tenant]
	if !ok {
		e = &entry{}
		c.tenants[tenant] = e
	}
	return e
}

// Token returns the tenant's token from the cache, reading the backing
// store when the cached one is older than the TTL or was refused.
func (c *Cache) Token(ctx context.Context, tenant string) (string, error) {
	e := c.entry(tenant)
	e.mu.Lock()
	defer e.mu.Unlock()
	now := c.opt.Clock.Now()
	if e.held && !e.stale && (now.Before(e.readAt.Add(c.opt.TTL)) || now.Before(e.retryAt)) {
		return e.answer(tenant)
	}
	tok, err := c.inner.Token(ctx, tenant)
	switch {
	case err == nil || errors.Is(err, provider.ErrNoCredentials):
		if e.stale {
			e.recheckedAt = now
		}
		e.held, e.none, e.token, e.readAt, e.stale, e.retryAt = true, err != nil, tok, now, false, time.Time{}
		return e.answer(tenant)
	case e.held && !e.stale && !e.none:
		// The backing store failed; the token it gave last is the best we
		// have (a rotated-out token fails with an auth error, which comes
		// back here as Invalidate).
		c.opt.Log.Warn("provider credentials unreadable; serving the cached ones",
			slog.String("tenant", tenant), slog.Duration("age", now.Sub(e.readAt)), slog.Any("err", err))
		e.retryAt = now.Add(c.opt.MinRefresh)
		return e.token, nil
	default:
		return "", fmt.Errorf("read provider credentials of tenant %q: %w", tenant, err)
	}
}

func (e *entry) answer(tenant string) (string, error) {
	if e.none {
		return "", fmt.Errorf("tenant %q: %w", tenant, provider.ErrNoCredentials)
	}
	return e.token, nil
}

// Invalidate drops the tenant's cached token if it is token, so the next
// Token reads the backing store — unless that token was read again less
// than MinRefresh ago already because of an earlier refusal.
func (c *Cache) Invalidate(ctx context.Context, tenant, token string) {
	e := c.entry(tenant)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.held || e.token != token || e.stale {
		return
	}
	if now := c.opt.Clock.Now(); !e.recheckedAt.IsZero() && now.Before(e.recheckedAt.Add(c.opt.MinRefresh)) {
		return
	}
	e.stale = true
	c.inner.Invalidate(ctx, tenant, token)
}
