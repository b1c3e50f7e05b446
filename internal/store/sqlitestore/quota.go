package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.QuotaStore = (*Store)(nil)

// quotaSchema (migration 11): one quota per tenant, one recipients counter
// per tenant and UTC day, and a partial index on the jobs a running-jobs
// quota counts.
const quotaSchema = `
CREATE TABLE quotas (
	tenant          TEXT NOT NULL PRIMARY KEY,
	max_running     INTEGER NOT NULL,
	max_recipients  INTEGER NOT NULL,
	updated_at      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE daily_recipients (
	tenant  TEXT NOT NULL,
	day     TEXT NOT NULL,
	total   INTEGER NOT NULL,
	PRIMARY KEY (tenant, day)
) WITHOUT ROWID;
CREATE INDEX jobs_active ON jobs (tenant) WHERE status IN ('starting', 'running', 'paused');
`

// activeStatusList is ActiveJobStatuses as an SQL list (it must match the
// jobs_active index).
var activeStatusList = func() string {
	q := make([]string, len(store.ActiveJobStatuses))
	for i, s := range store.ActiveJobStatuses {
		q[i] = "'" + string(s) + "'"
	}
	return strings.Join(q, ", ")
}()

// PutQuota sets a tenant's quota.
func (s *Store) PutQuota(ctx context.Context, q store.Quota) error {
	if q.Tenant == "" || q.MaxRunningJobs < 0 || q.MaxRecipientsPerDay < 0 {
		return fmt.Errorf("put quota: %w: a tenant and limits of 0 or more are required", store.ErrInvalidArgument)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO quotas (tenant, max_running, max_recipients, updated_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (tenant) DO UPDATE SET max_running = excluded.max_running,
				max_recipients = excluded.max_recipients, updated_at = excluded.updated_at`,
			q.Tenant, q.MaxRunningJobs, q.MaxRecipientsPerDay, toNanos(q.UpdatedAt))
		if err != nil {
			return fmt.Errorf("put quota of %s: %w", q.Tenant, err)
		}
		return nil
	})
}

// GetQuota reads a tenant's quota (the zero Quota when none is set).
func (s *Store) GetQuota(ctx context.Context, tenant string) (store.Quota, error) {
	q := store.Quota{Tenant: tenant}
	var updated int64
	err := s.r.QueryRowContext(ctx, `SELECT max_running, max_recipients, updated_at FROM quotas WHERE tenant = ?`, tenant).
		Scan(&q.MaxRunningJobs, &q.MaxRecipientsPerDay, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return q, nil
	}
	if err != nil {
		return store.Quota{}, mapErr(fmt.Errorf("read quota of %s: %w", tenant, err))
	}
	q.UpdatedAt = fromNanos(updated)
	return q, nil
}

// CountActiveJobs counts the tenant's starting, running and paused jobs,
// up to limit.
func (s *Store) CountActiveJobs(ctx context.Context, tenant string, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("count active jobs: %w: limit must be positive", store.ErrInvalidArgument)
	}
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM jobs
		WHERE tenant = ? AND status IN (`+activeStatusList+`) LIMIT ?)`, tenant, limit).Scan(&n)
	if err != nil {
		return 0, mapErr(fmt.Errorf("count active jobs of %s: %w", tenant, err))
	}
	return n, nil
}

// AddRecipients adds to a tenant's counter of a day if the total stays
// within Max.
func (s *Store) AddRecipients(ctx context.Context, p store.AddRecipientsParams) (store.AddRecipientsResult, error) {
	if p.Tenant == "" || p.Day == "" || p.Max < 0 {
		return store.AddRecipientsResult{}, fmt.Errorf("add recipients: %w: tenant, day and a bound of 0 or more are required", store.ErrInvalidArgument)
	}
	var out store.AddRecipientsResult
	err := s.write(ctx, func(tx *sql.Tx) error {
		var total int64
		err := tx.QueryRowContext(ctx, `SELECT total FROM daily_recipients WHERE tenant = ? AND day = ?`, p.Tenant, p.Day).Scan(&total)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("read recipients of %s on %s: %w", p.Tenant, p.Day, err)
		}
		if p.N > 0 && p.Max > 0 && total+p.N > p.Max {
			out = store.AddRecipientsResult{Total: total}
			return nil
		}
		total = max(total+p.N, 0)
		if _, err := tx.ExecContext(ctx, `INSERT INTO daily_recipients (tenant, day, total) VALUES (?, ?, ?)
			ON CONFLICT (tenant, day) DO UPDATE SET total = excluded.total`, p.Tenant, p.Day, total); err != nil {
			return fmt.Errorf("add recipients of %s on %s: %w", p.Tenant, p.Day, err)
		}
		out = store.AddRecipientsResult{Added: true, Total: total}
		return nil
	})
	return out, err
}
