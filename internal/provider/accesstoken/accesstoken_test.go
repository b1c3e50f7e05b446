package accesstoken

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/store"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestCacheKeepsATokenUntilMarginBeforeItsEnd(t *testing.T) {
	var c Cache
	if _, ok := c.Get("app", "s", t0); ok {
		t.Fatal("an empty cache has a token")
	}
	c.Put("app", "s", "tok", t0, 7200)
	if tok, ok := c.Get("app", "s", t0.Add(2*time.Hour-Margin-time.Second)); !ok || tok != "tok" {
		t.Fatalf("before the margin: %q %v, want tok", tok, ok)
	}
	if _, ok := c.Get("app", "s", t0.Add(2*time.Hour-Margin)); ok {
		t.Fatal("the token is kept into its margin")
	}
	if _, ok := c.Get("app", "rotated", t0); ok {
		t.Fatal("another secret of the app shares its token")
	}
	c.Put("short", "s", "tok", t0, 60) // shorter than 2×Margin: kept whole
	if _, ok := c.Get("short", "s", t0.Add(59*time.Second)); !ok {
		t.Fatal("a short-lived token is cut by the margin")
	}
	if _, ok := c.Get("short", "s", t0.Add(60*time.Second)); ok {
		t.Fatal("a short-lived token outlives its expires_in")
	}
}

func TestCacheDropsOnlyTheTokenStillCached(t *testing.T) {
	var c Cache
	c.Put("app", "s", "new", t0, 7200)
	c.Drop("app", "s", "old") // another call replaced it already
	if tok, ok := c.Get("app", "s", t0); !ok || tok != "new" {
		t.Fatalf("dropping a replaced token lost the new one: %q %v", tok, ok)
	}
	c.Drop("app", "s", "new")
	if _, ok := c.Get("app", "s", t0); ok {
		t.Fatal("the dropped token is still cached")
	}
}

type creds map[string]string

func (c creds) Token(_ context.Context, tenant string) (string, error) {
	if s, ok := c[tenant]; ok {
		return s, nil
	}
	return "", provider.ErrNoCredentials
}

func (creds) Invalidate(context.Context, string, string) {}

type owners map[string]string

func (o owners) AccountOwner(_ context.Context, account string) (string, error) {
	if account == "broken" {
		return "", errors.New("store down")
	}
	if t, ok := o[account]; ok {
		return t, nil
	}
	return "", store.ErrNotFound
}

func TestSecretIsTheOwnersCredential(t *testing.T) {
	ctx := context.Background()
	cr := creds{"": "default", "acme": "acme-secret"}
	own := owners{"a1": "acme", "a2": "nobody-creds"}
	for _, tc := range []struct {
		name, account, tenant, secret string
		creds                         provider.Credentials
		owners                        Owners
	}{
		{name: "no credentials: the fallback", account: "a1", secret: "fallback"},
		{name: "no owners: the default", account: "a1", secret: "default", creds: cr},
		{name: "the owner's", account: "a1", tenant: "acme", secret: "acme-secret", creds: cr, owners: own},
		{name: "unowned: the default", account: "a9", secret: "default", creds: cr, owners: own},
		{name: "owner without credentials: none", account: "a2", tenant: "nobody-creds", creds: cr, owners: own},
	} {
		tenant, secret, err := Secret(ctx, tc.creds, "fallback", tc.owners, tc.account)
		if err != nil || tenant != tc.tenant || secret != tc.secret {
			t.Errorf("%s: %q %q %v, want %q %q", tc.name, tenant, secret, err, tc.tenant, tc.secret)
		}
	}
	if _, _, err := Secret(ctx, cr, "", own, "broken"); err == nil {
		t.Error("a failed owner look-up gives a secret")
	}
}
