package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.TenantStore = (*Store)(nil)

const tokenCols = `id, tenant, name, role, hash, created_at, expires_at`

func scanToken(row interface{ Scan(...any) error }) (store.APIToken, error) {
	var t store.APIToken
	var role string
	var created, expires int64
	if err := row.Scan(&t.ID, &t.Tenant, &t.Name, &role, &t.Hash, &created, &expires); err != nil {
		return store.APIToken{}, err
	}
	t.Role, t.CreatedAt, t.ExpiresAt = store.Role(role), fromNanos(created), fromNanos(expires)
	return t, nil
}

// CreateToken stores a new token.
func (s *Store) CreateToken(ctx context.Context, t store.APIToken) error {
	if t.ID == "" || t.Tenant == "" || t.Hash == "" || !t.Role.Valid() {
		return fmt.Errorf("create token: %w: id, tenant, hash and a valid role are required", store.ErrInvalidArgument)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO api_tokens (`+tokenCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			t.ID, t.Tenant, t.Name, string(t.Role), t.Hash, toNanos(t.CreatedAt), toNanos(t.ExpiresAt))
		if err != nil {
			return fmt.Errorf("create token %s of %s: %w", t.ID, t.Tenant, err)
		}
		return nil
	})
}

// TokenByHash reads the token with that hash.
func (s *Store) TokenByHash(ctx context.Context, hash string) (store.APIToken, error) {
	t, err := scanToken(s.r.QueryRowContext(ctx, `SELECT `+tokenCols+` FROM api_tokens WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return store.APIToken{}, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.APIToken{}, mapErr(fmt.Errorf("read token: %w", err))
	}
	return t, nil
}

// ListTokens lists a tenant's tokens ordered by ID.
func (s *Store) ListTokens(ctx context.Context, tenant string) ([]store.APIToken, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+tokenCols+` FROM api_tokens WHERE tenant = ? ORDER BY id`, tenant)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list tokens of %s: %w", tenant, err))
	}
	defer rows.Close()
	out := []store.APIToken{}
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, mapErr(fmt.Errorf("list tokens of %s: %w", tenant, err))
		}
		out = append(out, t)
	}
	return out, mapErr(rows.Err())
}

// DeleteToken revokes a tenant's token.
func (s *Store) DeleteToken(ctx context.Context, tenant, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM api_tokens WHERE tenant = ? AND id = ?`, tenant, id)
		if err != nil {
			return fmt.Errorf("delete token %s of %s: %w", id, tenant, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return fmt.Errorf("token %s of %s: %w", id, tenant, store.ErrNotFound)
		}
		return nil
	})
}

// GrantAccount makes tenant the owner of a provider account.
func (s *Store) GrantAccount(ctx context.Context, tenant, account string, at time.Time) error {
	if tenant == "" || account == "" {
		return fmt.Errorf("grant account: %w: tenant and account are required", store.ErrInvalidArgument)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		var owner string
		err := tx.QueryRowContext(ctx, `SELECT tenant FROM account_owners WHERE account = ?`, account).Scan(&owner)
		switch {
		case err == nil && owner == tenant:
			return nil
		case err == nil:
			return fmt.Errorf("account %s is owned by another tenant: %w", account, store.ErrConflict)
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("grant account %s: %w", account, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO account_owners (account, tenant, granted_at) VALUES (?, ?, ?)`,
			account, tenant, toNanos(at)); err != nil {
			return fmt.Errorf("grant account %s: %w", account, err)
		}
		return nil
	})
}

// AccountOwner returns the tenant owning a provider account.
func (s *Store) AccountOwner(ctx context.Context, account string) (string, error) {
	var owner string
	err := s.r.QueryRowContext(ctx, `SELECT tenant FROM account_owners WHERE account = ?`, account).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("owner of account %s: %w", account, store.ErrNotFound)
	}
	if err != nil {
		return "", mapErr(fmt.Errorf("owner of account %s: %w", account, err))
	}
	return owner, nil
}

// PutToken binds the hash of an API token to a tenant as an admin token
// (how tokens were provisioned before roles); binding a hash already bound
// to another tenant is refused (ErrConflict).
func (s *Store) PutToken(ctx context.Context, tokenHash, tenant string) error {
	return store.PutProvisionedToken(ctx, s, tokenHash, tenant)
}

// TenantForToken returns the tenant owning a token hash.
func (s *Store) TenantForToken(ctx context.Context, tokenHash string) (string, error) {
	t, err := s.TokenByHash(ctx, tokenHash)
	return t.Tenant, err
}
