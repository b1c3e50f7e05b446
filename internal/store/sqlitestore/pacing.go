package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/qunfa/qunfa/internal/store"
)

// An account's random schedule (issue 20) is two rows of the buckets
// table, read and written in one transaction: PaceRecord(bucket) holds
// (tokens: drift, at: next slot, warm: warm start), and its gaps row
// (tokens: mean gap, at: gap, warm: gap before).
func paceGapsRow(bucket string) string { return store.PaceRecord(bucket) + ":gaps" }

// readPace reads the schedule of bucket through q (a transaction or the
// read pool); fresh tells a schedule never stored.
func readPace(ctx context.Context, q interface {
	QueryRowContext(context.Context, ...any) *sql.Row
}, bucket string) (store.PaceState, bool, error) {
	var st store.PaceState
	err := q.QueryRowContext(ctx, store.PaceRecord(bucket)).Scan(&st.Drift, &st.Next, &st.WarmStart)
	if errors.Is(err, sql.ErrNoRows) {
		return store.PaceState{}, true, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("read schedule %q: %w", bucket, err)
	}
	err = q.QueryRowContext(ctx, paceGapsRow(bucket)).Scan(&st.MeanGap, &st.Gap, &st.PrevGap)
	if errors.Is(err, sql.ErrNoRows) {
		return store.PaceState{}, true, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("read schedule gaps %q: %w", bucket, err)
	}
	return st, false, nil
}

// TakeSlots takes slots from an account's random schedule. As TakeTokens,
// it first looks through the read pool and takes the write lock only when
// a slot is due; the write transaction reads the schedule again and
// decides afresh.
func (s *Store) TakeSlots(ctx context.Context, p store.TakeSlotsParams) (store.TakeSlotsResult, error) {
	if err := p.Validate(); err != nil {
		return store.TakeSlotsResult{}, err
	}
	st, fresh, err := readPace(ctx, s.readBucket, p.Bucket)
	if err != nil {
		return store.TakeSlotsResult{}, mapErr(err)
	}
	look := p
	look.Rand = func() float64 { return 0 } // no draw is kept from a look
	if res, _ := store.TakeSlots(st, fresh, look); len(res.Slots) == 0 {
		return res, nil
	}
	var res store.TakeSlotsResult
	err = s.write(ctx, func(tx *sql.Tx) error {
		get := s.stmt(ctx, tx, qBucketGet)
		st, fresh, err := readPace(ctx, get, p.Bucket)
		if err != nil {
			return err
		}
		res, st = store.TakeSlots(st, fresh, p)
		if len(res.Slots) == 0 {
			return nil // taken meanwhile by another caller
		}
		put := s.stmt(ctx, tx, qBucketPut)
		if _, err := put.ExecContext(ctx, store.PaceRecord(p.Bucket), st.Drift, st.Next, st.WarmStart); err != nil {
			return fmt.Errorf("write schedule %q: %w", p.Bucket, err)
		}
		if _, err := put.ExecContext(ctx, paceGapsRow(p.Bucket), st.MeanGap, st.Gap, st.PrevGap); err != nil {
			return fmt.Errorf("write schedule gaps %q: %w", p.Bucket, err)
		}
		return nil
	})
	if err != nil {
		return store.TakeSlotsResult{}, err
	}
	return res, nil
}
