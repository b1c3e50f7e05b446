package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// frequencySchema is the log of frequency-cap charges: one row per item
// charged to a recipient of a tenant's account, at its charge time. Rows
// older than the account's window are pruned when the recipient is charged
// again, and rows older than the longest window by every charge.
const frequencySchema = `
CREATE TABLE freq_charges (
	tenant  TEXT NOT NULL,
	account TEXT NOT NULL,
	to_id   TEXT NOT NULL,
	job_id  TEXT NOT NULL,
	seq     INTEGER NOT NULL,
	at      INTEGER NOT NULL,
	PRIMARY KEY (tenant, account, to_id, job_id, seq)
) WITHOUT ROWID;
CREATE INDEX freq_charges_at ON freq_charges (at);
`

// ChargeFrequency charges the items in one write transaction, which SQLite
// runs one at a time: two jobs charging the same recipient at once see
// each other's charges, so together they never pass more than the cap.
func (s *Store) ChargeFrequency(ctx context.Context, p store.ChargeFrequencyParams) (store.ChargeFrequencyResult, error) {
	if p.Tenant == "" || p.Account == "" || p.JobID == "" || !p.Cap.Capped() {
		return store.ChargeFrequencyResult{}, fmt.Errorf("charge frequency: %w: tenant, account, job and a cap", store.ErrInvalidArgument)
	}
	if len(p.Charges) > store.MaxPutItems {
		return store.ChargeFrequencyResult{}, fmt.Errorf("charge frequency: %w: %d items, at most %d", store.ErrInvalidArgument, len(p.Charges), store.MaxPutItems)
	}
	res := store.ChargeFrequencyResult{Capped: map[int64]bool{}}
	if len(p.Charges) == 0 {
		return res, nil
	}
	now := toNanos(p.Now)
	since := now - int64(p.Cap.WindowSec)*int64(time.Second)
	oldest := now - int64(store.MaxFrequencyWindowSec)*int64(time.Second)
	err := s.write(ctx, func(tx *sql.Tx) error {
		clear(res.Capped)
		if _, err := tx.ExecContext(ctx, `DELETE FROM freq_charges WHERE at <= ?`, oldest); err != nil {
			return fmt.Errorf("charge frequency: prune: %w", err)
		}
		for _, c := range p.Charges {
			if _, err := tx.ExecContext(ctx, `DELETE FROM freq_charges WHERE tenant = ? AND account = ? AND to_id = ? AND at <= ?`,
				p.Tenant, p.Account, c.To, since); err != nil {
				return fmt.Errorf("charge frequency %s: %w", c.To, err)
			}
			var mine, n int
			err := tx.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(job_id = ? AND seq = ?), 0) FROM freq_charges
WHERE tenant = ? AND account = ? AND to_id = ?`, p.JobID, c.Seq, p.Tenant, p.Account, c.To).Scan(&n, &mine)
			if err != nil {
				return fmt.Errorf("charge frequency %s: %w", c.To, err)
			}
			switch {
			case mine > 0: // charged before: a retry of the same item
			case n >= p.Cap.Max:
				res.Capped[c.Seq] = true
			default:
				if _, err := tx.ExecContext(ctx, `INSERT INTO freq_charges (tenant, account, to_id, job_id, seq, at) VALUES (?, ?, ?, ?, ?, ?)`,
					p.Tenant, p.Account, c.To, p.JobID, c.Seq, now); err != nil {
					return fmt.Errorf("charge frequency %s: %w", c.To, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return store.ChargeFrequencyResult{}, err
	}
	return res, nil
}

// FrequencyCounts counts each recipient's charges in the window.
func (s *Store) FrequencyCounts(ctx context.Context, p store.FrequencyCountsParams) (map[string]int, error) {
	if p.Tenant == "" || p.Account == "" || p.WindowSec <= 0 {
		return nil, fmt.Errorf("frequency counts: %w: tenant, account and a window", store.ErrInvalidArgument)
	}
	since := toNanos(p.Now) - int64(p.WindowSec)*int64(time.Second)
	out := map[string]int{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		for _, to := range p.To {
			var n int
			err := tx.QueryRowContext(ctx, `SELECT count(*) FROM freq_charges WHERE tenant = ? AND account = ? AND to_id = ? AND at > ?`,
				p.Tenant, p.Account, to, since).Scan(&n)
			if err != nil {
				return fmt.Errorf("frequency counts %s: %w", to, err)
			}
			if n > 0 {
				out[to] = n
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
