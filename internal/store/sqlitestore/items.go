package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/qunfa/qunfa/internal/store"
)

// maxClaim bounds one claim; the port allows returning fewer than Max.
const maxClaim = 1000

// maxUpdates bounds one UpdateItems call.
const maxUpdates = 1000

// ClaimItems moves up to p.Max due pending items of a shard to submitted,
// in seq order, in one statement of one write transaction.
func (s *Store) ClaimItems(ctx context.Context, p store.ClaimItemsParams) (store.ClaimItemsResult, error) {
	if p.Max <= 0 || p.ClaimID == "" {
		return store.ClaimItemsResult{}, fmt.Errorf("claim items: %w: Max must be positive and ClaimID set", store.ErrInvalidArgument)
	}
	limit := min(p.Max, maxClaim)
	now := toNanos(p.Now)
	var res store.ClaimItemsResult
	err := s.write(ctx, func(tx *sql.Tx) error {
		no, err := s.jobNo(ctx, tx, p.JobID)
		if err != nil {
			return fmt.Errorf("claim items: %w", err)
		}
		rows, err := s.stmt(ctx, tx, qClaim).QueryContext(ctx, p.ClaimID, now, no, p.Index, limit)
		if err != nil {
			return fmt.Errorf("claim items of %s/%d: %w", p.JobID, p.Index, err)
		}
		defer rows.Close()
		res.Items = make([]store.Item, 0, limit)
		for rows.Next() {
			it := store.Item{
				JobID:       p.JobID,
				Shard:       p.Index,
				Status:      store.ItemSubmitted,
				ClaimID:     p.ClaimID,
				SubmittedAt: fromNanos(now),
			}
			var (
				vars, ref, cat, code, msg sql.NullString
				nextAt                    int64
			)
			if err := rows.Scan(&it.Seq, &it.Account, &it.To, &vars, &ref, &it.Attempts, &nextAt, &cat, &code, &msg); err != nil {
				return fmt.Errorf("claim items of %s/%d: %w", p.JobID, p.Index, err)
			}
			it.NextAttemptAt = fromNanos(nextAt)
			it.Ref = ref.String
			if err := decodeVars(vars, &it); err != nil {
				return err
			}
			it.Error = itemError(cat, code, msg)
			res.Items = append(res.Items, it)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("claim items of %s/%d: %w", p.JobID, p.Index, err)
		}
		_ = rows.Close()
		if len(res.Items) == 0 {
			// Nothing claimed: tell an empty shard from a missing one.
			if _, err := s.shardExists(ctx, tx, p.JobID, p.Index); err != nil {
				return fmt.Errorf("claim items: %w", err)
			}
		}
		// RETURNING gives no order guarantee.
		slices.SortFunc(res.Items, func(a, b store.Item) int { return cmpInt(a.Seq, b.Seq) })
		n := int64(len(res.Items))
		res.Delta = store.Counts{Pending: -n, Submitted: n}

		next, err := s.claimNextDue(ctx, tx, no, p.Index, res.Items, limit, now)
		if err != nil {
			return fmt.Errorf("next due item of %s/%d: %w", p.JobID, p.Index, err)
		}
		res.NextDueAt = fromNanos(next)
		return nil
	})
	if err != nil {
		return store.ClaimItemsResult{}, err
	}
	return res, nil
}

// claimNextDue is the NextDueAt of a claim that took claimed (in seq
// order) of at most limit at now: now if a pending item is still due, else
// the earliest next-attempt time of the pending items, 0 if none is
// pending. A claim of fewer than limit took every due item, fresh ones
// (next_at 0) included, so only items_due's retries can be left; a full
// claim looks past its last seq for one more due item first.
func (s *Store) claimNextDue(ctx context.Context, tx *sql.Tx, no int64, shard int, claimed []store.Item, limit int, now int64) (int64, error) {
	if len(claimed) == limit {
		var more bool
		last := claimed[len(claimed)-1].Seq
		if err := s.stmt(ctx, tx, qMoreDue).QueryRowContext(ctx, no, shard, last, now).Scan(&more); err != nil {
			return 0, err
		}
		if more {
			return now, nil
		}
	}
	var next sql.NullInt64
	if err := s.stmt(ctx, tx, qNextDue).QueryRowContext(ctx, no, shard).Scan(&next); err != nil {
		return 0, err
	}
	return next.Int64, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// shardExists returns the job number if the shard exists.
func (s *Store) shardExists(ctx context.Context, tx *sql.Tx, jobID string, index int) (int64, error) {
	no, err := s.jobNo(ctx, tx, jobID)
	if err != nil {
		return 0, err
	}
	var one int
	err = tx.QueryRowContext(ctx, `SELECT 1 FROM shards WHERE job_no = ? AND idx = ?`, no, index).Scan(&one)
	if err == sql.ErrNoRows {
		return 0, fmt.Errorf("shard %s/%d: %w", jobID, index, store.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("read shard %s/%d: %w", jobID, index, err)
	}
	return no, nil
}

func decodeVars(vars sql.NullString, it *store.Item) error {
	if !vars.Valid || vars.String == "" {
		return nil
	}
	if err := json.Unmarshal([]byte(vars.String), &it.Vars); err != nil {
		return fmt.Errorf("decode vars of item %d: %w", it.Seq, err)
	}
	return nil
}

func itemError(cat, code, msg sql.NullString) *store.ItemError {
	if !cat.Valid {
		return nil
	}
	return &store.ItemError{Category: cat.String, Code: code.String, Message: msg.String}
}

// itemState is the mutable part of an item that UpdateItems reads and
// writes.
type itemState struct {
	status   store.ItemStatus
	attempts int
	nextAt   int64
	claim    string
	err      *store.ItemError
	finAt    int64
	msgID    string
}

// UpdateItems applies conditional changes to items of one shard, in the
// order given, and reports the count and failure deltas they caused.
func (s *Store) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	if len(p.Updates) > maxUpdates {
		return store.UpdateItemsResult{}, fmt.Errorf("update items: %w: %d updates, at most %d", store.ErrInvalidArgument, len(p.Updates), maxUpdates)
	}
	for _, u := range p.Updates {
		if _, ok := statusCodes[u.From]; !ok {
			return store.UpdateItemsResult{}, fmt.Errorf("update item %d: %w: unknown status %q", u.Seq, store.ErrInvalidArgument, u.From)
		}
		if _, ok := statusCodes[u.To]; !ok {
			return store.UpdateItemsResult{}, fmt.Errorf("update item %d: %w: unknown status %q", u.Seq, store.ErrInvalidArgument, u.To)
		}
	}

	res := store.UpdateItemsResult{FailuresDelta: map[string]int64{}}
	err := s.write(ctx, func(tx *sql.Tx) error {
		no, err := s.jobNo(ctx, tx, p.JobID)
		if err != nil {
			return fmt.Errorf("update items: %w", err)
		}
		state, err := s.itemStates(ctx, tx, no, p.Index, p.Updates)
		if err != nil {
			return fmt.Errorf("update items of %s/%d: %w", p.JobID, p.Index, err)
		}
		if len(state) == 0 {
			// Nothing to update: tell an unknown shard from unknown items.
			if _, err := s.shardExists(ctx, tx, p.JobID, p.Index); err != nil {
				return fmt.Errorf("update items: %w", err)
			}
		}
		changed := make([]int64, 0, len(p.Updates))
		for _, u := range p.Updates {
			cur, ok := state[u.Seq]
			if !ok || cur.status != u.From || (u.ClaimID != "" && cur.claim != u.ClaimID) {
				res.Rejected = append(res.Rejected, u.Seq)
				continue
			}
			next := cur
			next.status = u.To
			if !u.KeepError {
				next.err = nil
				if u.Error != nil {
					e := *u.Error
					next.err = &e
				}
			}
			if u.To == store.ItemPending {
				next.nextAt = toNanos(u.NextAttemptAt)
			}
			if u.ResetAttempts {
				next.attempts = 0
			}
			switch {
			case !terminal(u.To):
				next.finAt, next.msgID = 0, ""
			case !terminal(cur.status):
				next.finAt = toNanos(p.At)
			}
			if u.To == store.ItemConfirmed && u.MsgID != "" {
				next.msgID = u.MsgID
			}
			next.attempts = max(0, next.attempts+u.AttemptsDelta)

			res.Delta.Move(cur.status, next.status)
			moveFailure(res.FailuresDelta, carriedCategory(cur.status, category(cur.err)), carriedCategory(next.status, category(next.err)))
			moveFailure(res.FailuresDelta, retriedTally(cur.status, cur.attempts), retriedTally(next.status, next.attempts))
			if !slices.Contains(changed, u.Seq) {
				changed = append(changed, u.Seq)
			}
			state[u.Seq] = next
		}
		args := make([]any, 0, len(changed)*itemWrites.args)
		for _, seq := range changed {
			st := state[seq]
			var cat, code, msg any
			if st.err != nil {
				cat, code, msg = st.err.Category, st.err.Code, st.err.Message
			}
			args = append(args, seq, statusCodes[st.status], st.attempts, st.nextAt, cat, code, msg, st.finAt, nullString(st.msgID))
		}
		if err := s.execRows(ctx, tx, itemWrites, args, no, p.Index); err != nil {
			return fmt.Errorf("update items of %s/%d: %w", p.JobID, p.Index, err)
		}
		return nil
	})
	if err != nil {
		return store.UpdateItemsResult{}, err
	}
	return res, nil
}

func category(e *store.ItemError) string {
	if e == nil {
		return ""
	}
	return e.Category
}

// itemStates reads the current state of the items of a shard listed in
// ups. A batch's items are mostly neighbours (a claim takes a shard's next
// pending items in seq order): when the seqs span at most twice as many
// as there are, one range scan reads them, the few between are skipped;
// otherwise each is looked up.
func (s *Store) itemStates(ctx context.Context, tx *sql.Tx, no int64, shard int, ups []store.ItemUpdate) (map[int64]itemState, error) {
	out := make(map[int64]itemState, len(ups))
	if len(ups) == 0 {
		return out, nil
	}
	lo, hi := ups[0].Seq, ups[0].Seq
	for _, u := range ups {
		lo, hi = min(lo, u.Seq), max(hi, u.Seq)
	}
	var rows *sql.Rows
	var err error
	var wanted map[int64]bool
	if hi-lo < 2*int64(len(ups)) {
		wanted = make(map[int64]bool, len(ups))
		for _, u := range ups {
			wanted[u.Seq] = true
		}
		rows, err = s.stmt(ctx, tx, qItemStateRange).QueryContext(ctx, no, shard, lo, hi)
	} else {
		seqs := make([]byte, 0, 8*len(ups)+2)
		seqs = append(seqs, '[')
		for i, u := range ups {
			if i > 0 {
				seqs = append(seqs, ',')
			}
			seqs = strconv.AppendInt(seqs, u.Seq, 10)
		}
		seqs = append(seqs, ']')
		rows, err = s.stmt(ctx, tx, qItemState).QueryContext(ctx, no, shard, string(seqs))
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			seq            int64
			code           int
			st             itemState
			cat, ecode, em sql.NullString
			msgID          sql.NullString
		)
		if err := rows.Scan(&seq, &code, &st.attempts, &st.nextAt, &st.claim, &cat, &ecode, &em, &st.finAt, &msgID); err != nil {
			return nil, err
		}
		if wanted != nil && !wanted[seq] {
			continue
		}
		st.msgID = msgID.String
		st.status = statusNames[code]
		st.err = itemError(cat, ecode, em)
		out[seq] = st
	}
	return out, rows.Err()
}

const itemCols = `j.id, i.shard, i.seq, i.account, i.to_id, i.vars, i.status, i.attempts, i.next_at, i.sub_at,
i.claim, i.cat, i.code, i.msg, i.ref, i.fin_at, i.msgid`

func scanItem(row interface{ Scan(...any) error }) (store.Item, error) {
	var (
		it                   store.Item
		vars, cat, code, msg sql.NullString
		ref, msgID           sql.NullString
		status               int
		nextAt, subAt, finAt int64
	)
	if err := row.Scan(&it.JobID, &it.Shard, &it.Seq, &it.Account, &it.To, &vars, &status, &it.Attempts,
		&nextAt, &subAt, &it.ClaimID, &cat, &code, &msg, &ref, &finAt, &msgID); err != nil {
		return it, err
	}
	it.Ref, it.FinishedAt, it.MsgID = ref.String, fromNanos(finAt), msgID.String
	it.Status = statusNames[status]
	it.NextAttemptAt = fromNanos(nextAt)
	it.SubmittedAt = fromNanos(subAt)
	it.Error = itemError(cat, code, msg)
	return it, decodeVars(vars, &it)
}

// ListItems lists a job's items in seq order with optional filters.
func (s *Store) ListItems(ctx context.Context, p store.ListItemsParams) (store.ListItemsResult, error) {
	limit, err := pageLimit(p.Limit, defaultItemsLimit)
	if err != nil {
		return store.ListItemsResult{}, fmt.Errorf("list items: %w", err)
	}
	after := int64(-1 << 63)
	if p.Cursor != "" {
		k, err := decodeCursor(p.Cursor, "i", 1)
		if err != nil {
			return store.ListItemsResult{}, fmt.Errorf("list items: %w", err)
		}
		after = k[0]
	}
	var res store.ListItemsResult
	err = s.read(ctx, func(tx *sql.Tx) error {
		no, err := s.jobNo(ctx, tx, p.JobID)
		if err != nil {
			return fmt.Errorf("list items: %w", err)
		}
		q, args, err := listItemsQuery(p, no, after, limit)
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("list items of job %q: %w", p.JobID, err)
		}
		defer rows.Close()
		for rows.Next() {
			it, err := scanItem(rows)
			if err != nil {
				return fmt.Errorf("list items of job %q: %w", p.JobID, err)
			}
			if len(res.Items) == limit {
				res.NextCursor = encodeCursor("i", res.Items[limit-1].Seq)
				break
			}
			res.Items = append(res.Items, it)
		}
		return rows.Err()
	})
	if err != nil {
		return store.ListItemsResult{}, err
	}
	return res, nil
}

// ListSubmittedItems lists items, across jobs, left submitted since before
// p.SubmittedBefore, in claim-time order.
func (s *Store) ListSubmittedItems(ctx context.Context, p store.ListSubmittedItemsParams) (store.ListItemsResult, error) {
	limit, err := pageLimit(p.Limit, defaultItemsLimit)
	if err != nil {
		return store.ListItemsResult{}, fmt.Errorf("list submitted items: %w", err)
	}
	// Key (sub_at, job_no, seq); start before every real key.
	k := []int64{-1 << 63, -1 << 63, -1 << 63}
	if p.Cursor != "" {
		if k, err = decodeCursor(p.Cursor, "s", 3); err != nil {
			return store.ListItemsResult{}, fmt.Errorf("list submitted items: %w", err)
		}
	}
	var res store.ListItemsResult
	err = s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+itemCols+`, i.job_no FROM items i INDEXED BY items_submitted
JOIN jobs j ON j.no = i.job_no
WHERE i.status = 1 AND i.sub_at < ? AND (i.sub_at, i.job_no, i.seq) > (?, ?, ?)
ORDER BY i.sub_at, i.job_no, i.seq LIMIT ?`, toNanos(p.SubmittedBefore), k[0], k[1], k[2], limit+1)
		if err != nil {
			return fmt.Errorf("list submitted items: %w", err)
		}
		defer rows.Close()
		var lastNo int64
		for rows.Next() {
			var no int64
			it, err := scanItem(scanPlus{rows, &no})
			if err != nil {
				return fmt.Errorf("list submitted items: %w", err)
			}
			if len(res.Items) == limit {
				last := res.Items[limit-1]
				res.NextCursor = encodeCursor("s", toNanos(last.SubmittedAt), lastNo, last.Seq)
				break
			}
			res.Items = append(res.Items, it)
			lastNo = no
		}
		return rows.Err()
	})
	if err != nil {
		return store.ListItemsResult{}, err
	}
	return res, nil
}

// scanPlus scans a row with extra trailing columns.
type scanPlus struct {
	rows  *sql.Rows
	extra *int64
}

func (s scanPlus) Scan(dest ...any) error { return s.rows.Scan(append(dest, s.extra)...) }

// terminal reports whether an item status ends the item.
func terminal(st store.ItemStatus) bool {
	return st == store.ItemConfirmed || st == store.ItemFailed || st == store.ItemAbandoned
}

// listItemsQuery is ListItems' statement for job number no: one index
// range per filter (ref, category, status, shard), so a page reads about
// a page of rows whatever the job's size.
func listItemsQuery(p store.ListItemsParams, no, after int64, limit int) (string, []any, error) {
	q := `SELECT ` + itemCols + ` FROM items i `
	where := ` JOIN jobs j ON j.no = i.job_no WHERE i.job_no = ? AND i.seq > ?`
	args := []any{no, after}
	switch {
	case p.Ref != "":
		q += `INDEXED BY items_ref`
		where += ` AND i.ref = ?`
		args = append(args, p.Ref)
		if p.Category != "" {
			where += ` AND i.cat = ?`
			args = append(args, p.Category)
		}
	case p.Category != "":
		q += `INDEXED BY items_category`
		where += ` AND i.cat = ?`
		args = append(args, p.Category)
	case p.Status == store.ItemFailed || p.Status == store.ItemAbandoned:
		q += `INDEXED BY items_failed`
	case p.Shard != nil:
		q += `NOT INDEXED` // the primary key: (job, shard, seq)
	case p.Status != "":
		q += `INDEXED BY items_status`
	default:
		q += `INDEXED BY items_seq`
	}
	if p.Status != "" {
		code, ok := statusCodes[p.Status]
		if !ok {
			return "", nil, fmt.Errorf("list items: %w: unknown status %q", store.ErrInvalidArgument, p.Status)
		}
		where += ` AND i.status = ` + strconv.Itoa(code)
		// The partial index's own term, so that it applies.
		if code >= codeFailed {
			where += ` AND i.status >= 3`
		} else if p.Ref == "" && p.Category == "" && p.Shard == nil {
			where += ` AND i.status < 3`
		}
	}
	if p.Shard != nil {
		where += ` AND i.shard = ?`
		args = append(args, *p.Shard)
	}
	args = append(args, limit+1)
	return q + where + ` ORDER BY i.seq LIMIT ?`, args, nil
}

var _ store.ItemGetter = (*Store)(nil)

// GetItems reads items of a shard by seq.
func (s *Store) GetItems(ctx context.Context, p store.GetItemsParams) ([]store.Item, error) {
	if len(p.Seqs) > store.MaxPutItems {
		return nil, fmt.Errorf("get items: %w: %d seqs, at most %d", store.ErrInvalidArgument, len(p.Seqs), store.MaxPutItems)
	}
	items := []store.Item{}
	if len(p.Seqs) == 0 {
		return items, nil
	}
	err := s.read(ctx, func(tx *sql.Tx) error {
		no, err := s.jobNo(ctx, tx, p.JobID)
		if err != nil {
			return fmt.Errorf("get items: %w", err)
		}
		args := []any{no, p.Shard}
		for _, seq := range p.Seqs {
			args = append(args, seq)
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+itemCols+` FROM items i JOIN jobs j ON j.no = i.job_no
WHERE i.job_no = ? AND i.shard = ? AND i.seq IN (?`+strings.Repeat(", ?", len(p.Seqs)-1)+`) ORDER BY i.seq`, args...)
		if err != nil {
			return fmt.Errorf("get items of job %q: %w", p.JobID, err)
		}
		defer rows.Close()
		for rows.Next() {
			it, err := scanItem(rows)
			if err != nil {
				return fmt.Errorf("get items of job %q: %w", p.JobID, err)
			}
			items = append(items, it)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return items, nil
}
