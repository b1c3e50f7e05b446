// Package accesstoken holds what the WeChat-family adapters (wecomapp,
// wechatmp) share around their access tokens: the secret of the tenant
// owning an account, and a cache of tokens keyed by app id and secret.
// Fetching a token and reading its refusals stay with each adapter: their
// APIs differ.
package accesstoken

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/store"
)

// Margin is how long before its end an access token is replaced.
const Margin = 5 * time.Minute

// Owners tells which tenant owns an account (store.ErrNotFound: nobody).
type Owners interface {
	AccountOwner(ctx context.Context, account string) (string, error)
}

// Secret is the secret of the tenant owning account: fallback when creds
// is nil; the default tenant's when owners is nil or nobody owns the
// account; "" when the tenant has no credentials.
func Secret(ctx context.Context, creds provider.Credentials, fallback string, owners Owners, account string) (tenant, secret string, err error) {
	if creds == nil {
		return "", fallback, nil
	}
	if owners != nil {
		tenant, err = owners.AccountOwner(ctx, account)
		if errors.Is(err, store.ErrNotFound) {
			tenant, err = "", nil
		}
		if err != nil {
			return "", "", fmt.Errorf("owner of account %s: %w", account, err)
		}
	}
	secret, err = creds.Token(ctx, tenant)
	if err != nil && !errors.Is(err, provider.ErrNoCredentials) {
		return "", "", err
	}
	return tenant, secret, nil
}

// Cache holds access tokens by app id and secret (a rotated secret gets
// its own token); the zero value is empty and ready; safe for concurrent
// use.
type Cache struct {
	mu     sync.Mutex
	tokens map[key]entry
}

type key struct{ appID, secret string }

type entry struct {
	token   string
	expires time.Time
}

// Get returns the app's token if it is still live at now.
func (c *Cache) Get(appID, secret string, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.tokens[key{appID, secret}]
	if !ok || !now.Before(e.expires) {
		return "", false
	}
	return e.token, true
}

// Put keeps token, fetched at now and valid for expiresIn seconds, until
// Margin before its end (a lifetime of at most 2×Margin is kept whole).
func (c *Cache) Put(appID, secret, token string, now time.Time, expiresIn int64) {
	life := time.Duration(expiresIn) * time.Second
	if life > 2*Margin {
		life -= Margin
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tokens == nil {
		c.tokens = map[key]entry{}
	}
	c.tokens[key{appID, secret}] = entry{token: token, expires: now.Add(life)}
}

// Drop forgets token if it is still the app's cached one (another call
// may have replaced it already).
func (c *Cache) Drop(appID, secret, token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := key{appID, secret}
	if e, ok := c.tokens[k]; ok && e.token == token {
		delete(c.tokens, k)
	}
}
