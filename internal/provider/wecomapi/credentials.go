package wecomapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/store"
)

// credential is the token a call of account goes out with, and whose it is.
type credential struct {
	tenant string
	token  string
}

// credential finds the account's tenant and asks Credentials for its
// token. No credential anywhere (ErrNoCredentials) means calls go out
// without one, as with an empty Config.Token.
func (c *Client) credential(ctx context.Context, account string) (credential, error) {
	if c.cfg.Credentials == nil {
		return credential{token: c.cfg.Token}, nil
	}
	tenant, err := c.owners.owner(ctx, account)
	if err != nil {
		return credential{}, err
	}
	tok, err := c.cfg.Credentials.Token(ctx, tenant)
	if err != nil && !errors.Is(err, provider.ErrNoCredentials) {
		return credential{}, fmt.Errorf("provider credentials of account %s: %w", account, err)
	}
	return credential{tenant: tenant, token: tok}, nil
}

// call makes the exchange with cred. If the provider refuses the token
// (an authentication error, so nothing was delivered), the refusal is
// reported to Credentials and, when the secret now holds another token —
// it was rotated — the call is made once more with it.
func (c *Client) call(ctx context.Context, cred credential, method, path, key string, body []byte) exchange {
	ex := c.exchange(ctx, cred.token, method, path, key, body)
	if c.cfg.Credentials == nil || !authRefused(ex) {
		return ex
	}
	c.cfg.Credentials.Invalidate(ctx, cred.tenant, cred.token)
	tok, err := c.cfg.Credentials.Token(ctx, cred.tenant)
	if err != nil && !errors.Is(err, provider.ErrNoCredentials) || tok == cred.token {
		return ex
	}
	c.cfg.Logger.Info("wecomapi provider token refused; calling again with the re-read one",
		slog.String("tenant", cred.tenant), slog.Int("status", ex.status))
	return c.exchange(ctx, tok, method, path, key, body)
}

// authRefused: the provider answered that the credential is missing,
// invalid or expired.
func authRefused(ex exchange) bool {
	if ex.err != nil {
		return false
	}
	if ex.status == http.StatusUnauthorized || ex.status == http.StatusForbidden {
		return true
	}
	if ex.status >= 500 {
		return false
	}
	// The answer was decoded whole: a field of another type than expected
	// (an UnmarshalTypeError, the rest still decoded) does not hide the
	// errcode, as it did not when only the errcode was read.
	var typeErr *json.UnmarshalTypeError
	if ex.parseErr != nil && !errors.As(ex.parseErr, &typeErr) {
		return false
	}
	return ex.ans.Errcode != nil && accountDownCodes[*ex.ans.Errcode]
}

// ownerMissTTL is how long "nobody owns this account" is believed: a
// grant made since reaches the sender within it. An owner, once known,
// never changes (a provider account is granted to one tenant for good).
const ownerMissTTL = time.Minute

// ownerCache remembers which tenant owns each account.
type ownerCache struct {
	owners AccountOwners
	clock  clock.Clock

	mu     sync.Mutex
	known  map[string]string
	missAt map[string]time.Time
}

func newOwnerCache(o AccountOwners, clk clock.Clock) *ownerCache {
	return &ownerCache{owners: o, clock: clk, known: map[string]string{}, missAt: map[string]time.Time{}}
}

// owner returns the tenant owning account, "" for an account nobody owns
// (it uses the default credential).
func (oc *ownerCache) owner(ctx context.Context, account string) (string, error) {
	if oc.owners == nil {
		return "", nil
	}
	now := oc.clock.Now()
	oc.mu.Lock()
	if t, ok := oc.known[account]; ok {
		oc.mu.Unlock()
		return t, nil
	}
	if at, ok := oc.missAt[account]; ok && now.Before(at.Add(ownerMissTTL)) {
		oc.mu.Unlock()
		return "", nil
	}
	oc.mu.Unlock()
	t, err := oc.owners.AccountOwner(ctx, account)
	oc.mu.Lock()
	defer oc.mu.Unlock()
	switch {
	case err == nil:
		oc.known[account] = t
		delete(oc.missAt, account)
		return t, nil
	case errors.Is(err, store.ErrNotFound):
		oc.missAt[account] = now
		return "", nil
	default:
		return "", fmt.Errorf("owner of account %s: %w", account, err)
	}
}
