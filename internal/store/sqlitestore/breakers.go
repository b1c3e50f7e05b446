package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/qunfa/qunfa/internal/store"
)

const breakerCols = `tenant, account, state, reason, opened_at, until, opens, probe_shard,
window_at, window_attempts, window_failures, updated_at, version, transitions`

// issue15Schema is migration 16 (issue 15): webhook kinds (http, or a
// WeCom group robot) and the breaker history. Each breaker counts its
// transitions and keeps the last store.MaxBreakerHistory of them in a
// ring: transition n is in slot (n-1) mod MaxBreakerHistory, so the table
// never grows past that many rows per account and nothing needs trimming.
const issue15Schema = `
ALTER TABLE webhooks ADD COLUMN kind TEXT NOT NULL DEFAULT '';
ALTER TABLE breakers ADD COLUMN transitions INTEGER NOT NULL DEFAULT 0;
CREATE TABLE breaker_history (
	tenant       TEXT NOT NULL,
	account      TEXT NOT NULL,
	slot         INTEGER NOT NULL,
	seq          INTEGER NOT NULL,
	from_state   TEXT NOT NULL,
	to_state     TEXT NOT NULL,
	at           INTEGER NOT NULL,
	reason       TEXT NOT NULL,
	failure_rate REAL NOT NULL,
	attempts     INTEGER NOT NULL,
	consecutive  INTEGER NOT NULL,
	opens        INTEGER NOT NULL,
	until        INTEGER NOT NULL,
	PRIMARY KEY (tenant, account, slot)
) WITHOUT ROWID;
`

func scanBreaker(row interface{ Scan(...any) error }) (store.Breaker, error) {
	var (
		b                                    store.Breaker
		state                                string
		openedAt, until, windowAt, updatedAt int64
	)
	err := row.Scan(&b.Tenant, &b.Account, &state, &b.Reason, &openedAt, &until, &b.Opens, &b.ProbeShard,
		&windowAt, &b.WindowAttempts, &b.WindowFailures, &updatedAt, &b.Version, &b.Transitions)
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
	if b.Transitions < 0 {
		return b, fmt.Errorf("%w: negative transitions", store.ErrInvalidArgument)
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
	next.Transition = nil
	if b.Transition != nil {
		next.Transitions = b.Transitions + 1
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		var cur int64
		err := tx.QueryRowContext(ctx, `SELECT version FROM breakers WHERE tenant = ? AND account = ?`, b.Tenant, b.Account).Scan(&cur)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("save breaker %s/%s: %w", b.Tenant, b.Account, err)
		}
		if cur != b.Version {
			return fmt.Errorf("save breaker %s/%s at version %d, stored %d: %w", b.Tenant, b.Account, b.Version, cur, store.ErrConflict)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO breakers (`+breakerCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (tenant, account) DO UPDATE SET state = excluded.state, reason = excluded.reason,
opened_at = excluded.opened_at, until = excluded.until, opens = excluded.opens, probe_shard = excluded.probe_shard,
window_at = excluded.window_at, window_attempts = excluded.window_attempts, window_failures = excluded.window_failures,
updated_at = excluded.updated_at, version = excluded.version, transitions = excluded.transitions`,
			next.Tenant, next.Account, string(next.State), next.Reason, toNanos(next.OpenedAt), toNanos(next.Until),
			next.Opens, next.ProbeShard, toNanos(next.WindowAt), next.WindowAttempts, next.WindowFailures,
			toNanos(next.UpdatedAt), next.Version, next.Transitions)
		if err != nil {
			return fmt.Errorf("save breaker %s/%s: %w", b.Tenant, b.Account, err)
		}
		if tr := b.Transition; tr != nil {
			_, err = tx.ExecContext(ctx, `INSERT OR REPLACE INTO breaker_history (tenant, account, slot, seq, from_state, to_state,
at, reason, failure_rate, attempts, consecutive, opens, until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				b.Tenant, b.Account, (next.Transitions-1)%store.MaxBreakerHistory, next.Transitions, string(tr.From), string(tr.To),
				toNanos(tr.At), tr.Reason, tr.FailureRate, tr.Attempts, tr.ConsecutiveFailures, tr.Opens, toNanos(tr.Until))
			if err != nil {
				return fmt.Errorf("record breaker transition of %s/%s: %w", b.Tenant, b.Account, err)
			}
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

// ListBreakerHistory reads an account's ring of transitions, newest first.
func (s *Store) ListBreakerHistory(ctx context.Context, tenant, account string) ([]store.BreakerTransition, error) {
	if tenant == "" || account == "" {
		return nil, fmt.Errorf("list breaker history: %w: empty tenant or account", store.ErrInvalidArgument)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT seq, from_state, to_state, at, reason, failure_rate, attempts, consecutive,
opens, until FROM breaker_history WHERE tenant = ? AND account = ? ORDER BY seq DESC`, tenant, account)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list breaker history of %s/%s: %w", tenant, account, err))
	}
	defer rows.Close()
	out := []store.BreakerTransition{}
	for rows.Next() {
		var (
			tr        store.BreakerTransition
			from, to  string
			at, until int64
		)
		if err := rows.Scan(&tr.Seq, &from, &to, &at, &tr.Reason, &tr.FailureRate, &tr.Attempts,
			&tr.ConsecutiveFailures, &tr.Opens, &until); err != nil {
			return nil, mapErr(fmt.Errorf("list breaker history of %s/%s: %w", tenant, account, err))
		}
		tr.From, tr.To = store.BreakerState(from), store.BreakerState(to)
		tr.At, tr.Until = fromNanos(at), fromNanos(until)
		out = append(out, tr)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(fmt.Errorf("list breaker history of %s/%s: %w", tenant, account, err))
	}
	return out, nil
}
