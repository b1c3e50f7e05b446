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
	"strings"
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

// AccountKey is the name an account's own credential is stored under:
// the account with ":" spelled "." ("<corpid>:<agentid>" is the file
// accounts/<corpid>.<agentid> locally, the secret
// <prefix>accounts/<corpid>.<agentid>/provider on AWS).
func AccountKey(account string) string { return strings.ReplaceAll(account, ":", ".") }

// Lookup finds the credential of an account: its own (Accounts, by
// AccountKey) when it has one, else its owner tenant's (Tenants, which
// gives the default credential to a tenant without its own).
type Lookup struct {
	// Accounts holds the accounts' own credentials (nil: none;
	// provider.ErrNoCredentials for an account without one).
	Accounts provider.Credentials
	// Tenants holds the tenants' credentials and the default one.
	Tenants provider.Credentials
	// Owners maps an account to its tenant (nil: the default tenant).
	Owners Owners
}

// Source is where a credential was found; a refused one is reported
// back to it (Invalidate) and read again (Reread) from the same place.
type Source struct {
	creds provider.Credentials
	name  string
	// Tenant is the account's owner ("" for the default tenant or an
	// account's own credential).
	Tenant string
}

// Find returns the account's credential ("" when there is none at all)
// and where it was found.
func (l Lookup) Find(ctx context.Context, account string) (string, Source, error) {
	if l.Accounts != nil {
		key := AccountKey(account)
		secret, err := l.Accounts.Token(ctx, key)
		switch {
		case err == nil:
			return secret, Source{creds: l.Accounts, name: key}, nil
		case !errors.Is(err, provider.ErrNoCredentials):
			return "", Source{}, fmt.Errorf("credential of account %s: %w", account, err)
		}
	}
	if l.Tenants == nil {
		return "", Source{}, nil
	}
	tenant, secret, err := Secret(ctx, l.Tenants, "", l.Owners, account)
	if err != nil {
		return "", Source{}, err
	}
	return secret, Source{creds: l.Tenants, name: tenant, Tenant: tenant}, nil
}

// Invalidate reports secret as refused to where it came from.
func (s Source) Invalidate(ctx context.Context, secret string) {
	if s.creds != nil {
		s.creds.Invalidate(ctx, s.name, secret)
	}
}

// Reread reads the credential again from where it came from.
func (s Source) Reread(ctx context.Context) (string, error) {
	if s.creds == nil {
		return "", provider.ErrNoCredentials
	}
	return s.creds.Token(ctx, s.name)
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
