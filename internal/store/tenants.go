package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Role is what an API token may do (DESIGN.md, "Tenants, roles, provider
// accounts"): read (GET only), operate (jobs and every job command,
// suppressions, campaigns, webhooks), admin (also accounts and tokens).
type Role string

// Roles, weakest first.
const (
	RoleRead    Role = "read"
	RoleOperate Role = "operate"
	RoleAdmin   Role = "admin"
)

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool { return r.rank() > 0 }

// Allows reports whether a token of role r may do what needs role need.
func (r Role) Allows(need Role) bool { return r.rank() >= need.rank() && r.rank() > 0 }

func (r Role) rank() int {
	switch r {
	case RoleRead:
		return 1
	case RoleOperate:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// APIToken is a tenant's API token. The secret itself is never stored:
// Hash is its hex SHA-256.
type APIToken struct {
	ID        string
	Tenant    string
	Name      string
	Role      Role
	Hash      string
	CreatedAt time.Time
	// ExpiresAt is when the token stops working (zero: never).
	ExpiresAt time.Time
}

// Expired reports whether the token no longer works at now.
func (t APIToken) Expired(now time.Time) bool {
	return !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt)
}

// TenantStore keeps the tenants' API tokens and which tenant owns each
// provider account. A provider account (the guid the provider knows)
// belongs to at most one tenant.
type TenantStore interface {
	// CreateToken stores a new token; ErrConflict when its hash or its
	// id is taken, ErrInvalidArgument when a field is missing or the role
	// unknown.
	CreateToken(ctx context.Context, t APIToken) error
	// TokenByHash reads the token with that hash (ErrNotFound).
	TokenByHash(ctx context.Context, hash string) (APIToken, error)
	// ListTokens lists a tenant's tokens ordered by ID.
	ListTokens(ctx context.Context, tenant string) ([]APIToken, error)
	// DeleteToken revokes a tenant's token: from its return on, the token
	// is unknown. ErrNotFound when the tenant has no such token.
	DeleteToken(ctx context.Context, tenant, id string) error
	// GrantAccount makes tenant the owner of a provider account;
	// idempotent for the same tenant, ErrConflict when another tenant owns
	// it.
	GrantAccount(ctx context.Context, tenant, account string, at time.Time) error
	// AccountOwner returns the tenant owning a provider account
	// (ErrNotFound when nobody does).
	AccountOwner(ctx context.Context, account string) (string, error)
}

// ProvisionedToken is the admin token that PutToken binds to a tenant:
// a token provisioned by the operator outside the API (its id comes from
// the hash, so provisioning it again is idempotent).
func ProvisionedToken(hash, tenant string) APIToken {
	id := hash
	if len(id) > 16 {
		id = id[:16]
	}
	return APIToken{ID: "tok_" + id, Tenant: tenant, Name: "provisioned", Role: RoleAdmin, Hash: hash}
}

// PutProvisionedToken binds a token hash to a tenant as its admin token
// (operator provisioning, Store.PutToken): idempotent for the same tenant,
// ErrConflict when the hash is bound to another — never rebound.
func PutProvisionedToken(ctx context.Context, ts TenantStore, hash, tenant string) error {
	if hash == "" || tenant == "" {
		return fmt.Errorf("put token: %w: empty hash or tenant", ErrInvalidArgument)
	}
	err := ts.CreateToken(ctx, ProvisionedToken(hash, tenant))
	if errors.Is(err, ErrConflict) {
		if cur, rerr := ts.TokenByHash(ctx, hash); rerr == nil && cur.Tenant == tenant {
			return nil
		}
		return fmt.Errorf("put token: bound to another tenant: %w", ErrConflict)
	}
	return err
}
