package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/qunfa/qunfa/internal/store"
)

// AcquireLease takes the named lease if it is free at p.Now or already
// p.Holder's.
func (s *Store) AcquireLease(ctx context.Context, p store.AcquireLeaseParams) (store.Lease, error) {
	if p.Name == "" || p.Holder == "" {
		return store.Lease{}, fmt.Errorf("acquire lease: %w: name and holder are required", store.ErrInvalidArgument)
	}
	out := store.Lease{Name: p.Name, Holder: p.Holder, Until: fromNanos(toNanos(p.Until))}
	err := s.write(ctx, func(tx *sql.Tx) error {
		var holder, cursor string
		var until int64
		err := tx.QueryRowContext(ctx, `SELECT holder, until, cursor FROM leases WHERE name = ?`, p.Name).Scan(&holder, &until, &cursor)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("read lease %s: %w", p.Name, err)
		case holder != "" && holder != p.Holder && until > toNanos(p.Now):
			return fmt.Errorf("lease %s is held by %s: %w", p.Name, holder, store.ErrConflict)
		}
		out.Cursor = cursor
		_, err = tx.ExecContext(ctx, `INSERT INTO leases (name, holder, until, cursor) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until`, p.Name, p.Holder, toNanos(p.Until), cursor)
		if err != nil {
			return fmt.Errorf("write lease %s: %w", p.Name, err)
		}
		return nil
	})
	return out, err
}

// ReleaseLease frees p.Holder's lease, keeping p.Cursor.
func (s *Store) ReleaseLease(ctx context.Context, p store.ReleaseLeaseParams) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE leases SET holder = '', until = 0, cursor = ? WHERE name = ? AND holder = ?`,
			p.Cursor, p.Name, p.Holder)
		if err != nil {
			return fmt.Errorf("release lease %s: %w", p.Name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("lease %s is not held by %s: %w", p.Name, p.Holder, store.ErrConflict)
		}
		return nil
	})
}

// ReleaseAbandonedLeases frees every lease, keeping its cursor. Only the
// process that owns the data directory alone (the local stack, which locks
// it) may call it, at start: whatever held a lease then died with the
// previous life of the process, and waiting out the lease would stop the
// reconciler for minutes after a crash.
func (s *Store) ReleaseAbandonedLeases(ctx context.Context) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE leases SET holder = '', until = 0 WHERE holder <> ''`)
		if err != nil {
			return fmt.Errorf("release abandoned leases: %w", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return int(n), err
}
