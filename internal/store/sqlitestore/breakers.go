package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/qunfa/qunfa/internal/store"
)

const breakerCols = `tenant, account, state, reason, opened_at, until, opens, probe_shard,
window_at, window_attempts, window_failures, updated_at, version`

func scanBreaker(row interface{ Scan(...any) error }) (store.Breaker, error) {
	var (
		b                                    store.Breaker
		state                                string
		openedAt, until, windowAt, updatedAt int64
	)
	err := row.Scan(&b.Tenant, &b.Account, &state, &b.Reason, &openedAt, &until, &b.Opens, &b.ProbeShard,
		&windowAt, &b.WindowAttempts, &b.WindowFailures, &updatedAt, &b.Version)
	if err != nil {
		return b, err
	}
	b.State = store.BreakerState(state)
	b.OpenedAt, b.Until = fromNanos(openedAt), fromNanos(until)
	b.WindowAt, b.UpdatedAt = fromNanos(windowAt), fromNanos(updatedAt)
	return b, nil
}

// checkBreaker validates a breaker to save and fills in the closed state.
func checkBreaker(b store.Breaker) (store.Breaker, error) {
	if b.Tenant == "" || b.Account == "" {
		return b, fmt.Errorf("%w: empty tenant or account", store.ErrInvalidArgument)
	}
	if b.Version < 0 || b.Opens < 0 {
		return b, fmt.Errorf("%w: negative version or opens", store.ErrInvalidArgument)
	}
	switch b.State {
	case "":
		b.State = store.BreakerClosed
	case store.BreakerClosed, store.BreakerOpen, store.BreakerHalfOpen:
	default:
		return b, fmt.Errorf("%w: breaker state %q", store.ErrInvalidArgument, b.State)
	}
	return b, nil
}

// GetBreaker reads an account's breaker; an account without a stored
// breaker has a closed one at version 0.
func (s *Store) GetBreaker(ctx context.Context, tenant, account string) (store.Breaker, error) {
	if tenant == "" || account == "" {
		return store.Breaker{}, fmt.Errorf("get breaker: %w: empty tenant or account", store.ErrInvalidArgument)
	}
	b, err := scanBreaker(s.r.QueryRowContext(ctx,
		`SELECT `+breakerCols+` FROM breakers WHERE tenant = ? AND account = ?`, tenant, account))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Breaker{Tenant: tenant, Account: account, State: store.BreakerClosed}, nil
	}
	if err != nil {
		return store.Breaker{}, mapErr(fmt.Errorf("get breaker %s/%s: %w", tenant, account, err))
	}
	return b, nil
}

// SaveBreaker writes b if the stored version is still b.Version (no row
// stands for version 0).
func (s *Store) SaveBreaker(ctx context.Context, b store.Breaker) (store.Breaker, error) {
	b, err := checkBreaker(b)
	if err != nil {
		return store.Breaker{}, fmt.Errorf("save breaker: %w", err)
	}
	next := b
	next.Version = b.Version + 1
	next.OpenedAt, next.Until = fromNanos(toNanos(b.OpenedAt)), fromNanos(toNanos(b.Until))
	next.WindowAt, next.UpdatedAt = fromNanos(toNanos(b.WindowAt)), fromNanos(toNanos(b.UpdatedAt))
	err = s.write(ctx, func(tx *sql.Tx) error {
		var cur int64
		err := tx.QueryRowContext(ctx, `SELECT version FROM breakers WHERE tenant = ? AND account = ?`, b.Tenant, b.Account).Scan(&cur)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("save breaker %s/%s: %w", b.Tenant, b.Account, err)
		}
		if cur != b.Version {
			return fmt.Errorf("save breaker %s/%s at version %d, stored %d: %w", b.Tenant, b.Account, b.Version, cur, store.ErrConflict)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO breakers (`+breakerCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (tenant, account) DO UPDATE SET state = excluded.state, reason = excluded.reason,
opened_at = excluded.opened_at, until = excluded.until, opens = excluded.opens, probe_shard = excluded.probe_shard,
window_at = excluded.window_at, window_attempts = excluded.window_attempts, window_failures = excluded.window_failures,
updated_at = excluded.updated_at, version = excluded.version`,
			next.Tenant, next.Account, string(next.State), next.Reason, toNanos(next.OpenedAt), toNanos(next.Until),
			next.Opens, next.ProbeShard, toNanos(next.WindowAt), next.WindowAttempts, next.WindowFailures,
			toNanos(next.UpdatedAt), next.Version)
		if err != nil {
			return fmt.Errorf("save breaker %s/%s: %w", b.Tenant, b.Account, err)
		}
		return nil
	})
	if err != nil {
		return store.Breaker{}, err
	}
	return next, nil
}

// ListBreakers lists the non-closed breakers of all tenants (through the
// partial index breakers_open), or every stored one, ordered by tenant and
// account.
func (s *Store) ListBreakers(ctx context.Context, p store.ListBreakersParams) ([]store.Breaker, error) {
	q := `SELECT ` + breakerCols + ` FROM breakers INDEXED BY breakers_open WHERE state <> 'closed' ORDER BY tenant, account`
	if p.AllStates {
		q = `SELECT ` + breakerCols + ` FROM breakers ORDER BY tenant, account`
	}
	rows, err := s.r.QueryContext(ctx, q)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list breakers: %w", err))
	}
	defer rows.Close()
	var out []store.Breaker
	for rows.Next() {
		b, err := scanBreaker(rows)
		if err != nil {
			return nil, mapErr(fmt.Errorf("list breakers: %w", err))
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(fmt.Errorf("list breakers: %w", err))
	}
	return out, nil
}
