package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"

	"github.com/qunfa/qunfa/internal/store"
)

// maxClaim bounds one claim; the port allows returning fewer than Max.
const maxClaim = 1000

// maxUpdates bounds one UpdateItems call.
const maxUpdates = 1000

// ClaimItems moves up to p.Max due pending items of a shard to submitted,
// in seq order, in one write transaction: whole runs, the last split when
// it holds more than the claim takes (the rest stays pending as a run of
// its own).
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
		runs, err := s.dueRuns(ctx, tx, no, p.Index, now, limit)
		if err != nil {
			return fmt.Errorf("claim items of %s/%d: %w", p.JobID, p.Index, err)
		}
		if len(runs) == 0 {
			// Nothing claimed: tell an empty shard from a missing one.
			if _, err := s.shardExists(ctx, tx, p.JobID, p.Index); err != nil {
				return fmt.Errorf("claim items: %w", err)
			}
		}
		res.Items = make([]store.Item, 0, limit)
		for i := range runs {
			r := &runs[i]
			if err := s.claimRun(ctx, tx, no, r, limit-len(res.Items), p.ClaimID, now); err != nil {
				return fmt.Errorf("claim items of %s/%d: %w", p.JobID, p.Index, err)
			}
			for _, e := range r.items {
				it, err := r.item(p.JobID, e)
				if err != nil {
					return err
				}
				res.Items = append(res.Items, it)
			}
		}
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

// claimRun claims the first k items of r (all if it has fewer) under
// claim at now: the rest, if any, stays pending as a run of its own. On
// return r.items are the claimed items, r.st their state. A run read
// undecoded has its body cut, not decoded and encoded again.
func (s *Store) claimRun(ctx context.Context, tx *sql.Tx, no int64, r *run, k int, claim string, now int64) error {
	rest := r.st
	r.st.status, r.st.claim, r.st.subAt = codeSubmitted, claim, now
	r.st.attempts++
	if r.items != nil { // a run of one of before runs
		if k < len(r.items) {
			tail := run{shard: r.shard, st: rest, items: r.items[k:]}
			if err := s.putRun(ctx, tx, no, &tail); err != nil {
				return err
			}
			r.items = r.items[:k]
		}
		return s.putRun(ctx, tx, no, r)
	}
	raw := r.raw
	if k >= raw.n {
		items, err := decodeBody(raw.first, raw.n, raw.body)
		if err != nil {
			return err
		}
		if items[len(items)-1].seq-raw.first != raw.span {
			return fmt.Errorf("%w: run of %d spans %d, body says %d", errCorruptRun, raw.first, raw.span, items[len(items)-1].seq-raw.first)
		}
		r.items = items
		return s.putRawRun(ctx, tx, no, r.shard, r.st, raw)
	}
	head, headBody, restFirst, restBody, err := raw.split(k)
	if err != nil {
		return err
	}
	last := raw.first + raw.span
	if restFirst > last {
		return fmt.Errorf("%w: run of %d spans %d, its item %d is at %d", errCorruptRun, raw.first, raw.span, k, restFirst)
	}
	if err := s.putRawRun(ctx, tx, no, r.shard, rest, rawRun{first: restFirst, n: raw.n - k, span: last - restFirst, body: restBody}); err != nil {
		return err
	}
	r.items = head
	return s.putRawRun(ctx, tx, no, r.shard, r.st, rawRun{first: raw.first, n: k, span: head[k-1].seq - raw.first, body: headBody})
}

// dueRuns reads the due pending runs of a shard in seq order until they
// hold limit items.
func (s *Store) dueRuns(ctx context.Context, tx *sql.Tx, no int64, shard int, now int64, limit int) ([]run, error) {
	rows, err := s.stmt(ctx, tx, qClaimRuns).QueryContext(ctx, no, shard, now, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []run
	n := 0
	for n < limit && rows.Next() {
		r, err := scanRunLazy(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
		n += max(len(r.items), r.raw.n)
	}
	return out, rows.Err()
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

// UpdateItems applies conditional changes to items of one shard, in the
// order given, and reports the count and failure deltas they caused. The
// runs holding the items are read, changed item by item, and written
// again as runs of equal state: uniform outcomes of a run rewrite its row,
// divergent ones split it.
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
		runs, at, err := s.runsOf(ctx, tx, no, p.Index, p.Updates)
		if err != nil {
			return fmt.Errorf("update items of %s/%d: %w", p.JobID, p.Index, err)
		}
		if len(runs) == 0 {
			// Nothing to update: tell an unknown shard from unknown items.
			if _, err := s.shardExists(ctx, tx, p.JobID, p.Index); err != nil {
				return fmt.Errorf("update items: %w", err)
			}
		}
		flats := make([][]flat, len(runs))
		for i := range runs {
			flats[i] = runs[i].flatten(nil)
		}
		changed := make([]bool, len(runs))
		for _, u := range p.Updates {
			loc, ok := at[u.Seq]
			if !ok {
				res.Rejected = append(res.Rejected, u.Seq)
				continue
			}
			f := &flats[loc[0]][loc[1]]
			if next, ok := applyUpdate(f, u, toNanos(p.At), &res); ok {
				*f = next
				changed[loc[0]] = true
			} else {
				res.Rejected = append(res.Rejected, u.Seq)
			}
		}
		for i := range runs {
			if !changed[i] {
				continue
			}
			for _, r := range formRuns(p.Index, flats[i]) {
				if err := s.putRun(ctx, tx, no, &r); err != nil {
					return fmt.Errorf("update items of %s/%d: %w", p.JobID, p.Index, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return store.UpdateItemsResult{}, err
	}
	return res, nil
}

// applyUpdate is f after u at time at (Unix nanoseconds), and the count
// and failure deltas it adds to res; false if u's condition fails.
func applyUpdate(f *flat, u store.ItemUpdate, at int64, res *store.UpdateItemsResult) (flat, bool) {
	cur := f.st
	from := statusNames[cur.status]
	if from != u.From || (u.ClaimID != "" && cur.claim != u.ClaimID) {
		return flat{}, false
	}
	next := *f
	next.st.status = statusCodes[u.To]
	if !u.KeepError {
		next.st.hasErr, next.st.cat, next.st.code, next.st.msg = false, "", "", ""
		if u.Error != nil {
			next.st.hasErr, next.st.cat, next.st.code, next.st.msg = true, u.Error.Category, u.Error.Code, u.Error.Message
		}
	}
	if u.To == store.ItemPending {
		next.st.nextAt = toNanos(u.NextAttemptAt)
	}
	if u.ResetAttempts {
		next.st.attempts = 0
	}
	switch {
	case !terminal(u.To):
		next.st.finAt, next.e.msgID = 0, ""
	case !terminal(from):
		next.st.finAt = at
	}
	if u.To == store.ItemConfirmed && u.MsgID != "" {
		next.e.msgID = u.MsgID
	}
	next.st.attempts = max(0, next.st.attempts+u.AttemptsDelta)

	res.Delta.Move(from, u.To)
	moveFailure(res.FailuresDelta, carriedCategory(from, cur.category()), carriedCategory(u.To, next.st.category()))
	moveFailure(res.FailuresDelta, retriedTally(from, cur.attempts), retriedTally(u.To, next.st.attempts))
	return next, true
}

// category is the category of the items' error, "" without one.
func (st runState) category() string {
	if !st.hasErr {
		return ""
	}
	return st.cat
}

// runsOf reads the runs of a shard holding the items ups name, and where
// each item is among them: at[seq] = {run, index in the run}. A batch's
// items are mostly neighbours (a claim takes a shard's next pending items
// in seq order), so it reads a few runs.
func (s *Store) runsOf(ctx context.Context, tx *sql.Tx, no int64, shard int, ups []store.ItemUpdate) ([]run, map[int64][2]int, error) {
	seqs := make([]int64, len(ups))
	for i, u := range ups {
		seqs[i] = u.Seq
	}
	slices.Sort(seqs)
	seqs = slices.Compact(seqs)
	var runs []run
	at := make(map[int64][2]int, len(seqs))
	probe := func(args ...any) *sql.Row { return s.stmt(ctx, tx, qRunAt).QueryRowContext(ctx, args...) }
	for _, seq := range seqs {
		if len(runs) == 0 || seq > runs[len(runs)-1].last() {
			r, ok, err := runAt(probe, no, shard, seq)
			if err != nil {
				return nil, nil, err
			}
			if !ok {
				continue
			}
			runs = append(runs, r)
		}
		if i := runs[len(runs)-1].indexOf(seq); i >= 0 {
			at[seq] = [2]int{len(runs) - 1, i}
		}
	}
	return runs, at, nil
}

// ListItems lists a job's items in seq order with optional filters. The
// filters select runs (their items share status, error and ref); the runs
// from the cursor on are merged into items in seq order.
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
		q, args, err := listItemsQuery(p, no, after)
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("list items of job %q: %w", p.JobID, err)
		}
		defer rows.Close()
		var m runMerger
		for len(m.out) <= limit && rows.Next() {
			r, err := scanRun(rows)
			if err != nil {
				return fmt.Errorf("list items of job %q: %w", p.JobID, err)
			}
			items, err := r.itemsAfter(p.JobID, after)
			if err != nil {
				return err
			}
			m.add([2]int64{}, r.first(), items)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("list items of job %q: %w", p.JobID, err)
		}
		if len(m.out) <= limit {
			m.flush()
		}
		res.Items = m.out
		if len(res.Items) > limit {
			res.Items = res.Items[:limit]
			res.NextCursor = encodeCursor("i", res.Items[limit-1].Seq)
		}
		return nil
	})
	if err != nil {
		return store.ListItemsResult{}, err
	}
	return res, nil
}

// itemsAfter is the items of r after seq after, of job jobID.
func (r *run) itemsAfter(jobID string, after int64) ([]store.Item, error) {
	out := make([]store.Item, 0, len(r.items))
	for _, e := range r.items {
		if e.seq <= after {
			continue
		}
		it, err := r.item(jobID, e)
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, nil
}

// ListSubmittedItems lists items, across jobs, left submitted since before
// p.SubmittedBefore, in claim-time order: by (claim time, job, seq).
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
		// A run of the cursor's claim time and job holds items after the
		// cursor's seq if it starts at most runSpan before and its span
		// reaches past the cursor's seq.
		rows, err := tx.QueryContext(ctx, `SELECT `+runCols+`, i.job_no, j.id FROM items i INDEXED BY items_submitted
JOIN jobs j ON j.no = i.job_no
WHERE i.status = 1 AND i.sub_at < ?1 AND (i.sub_at, i.job_no, i.seq) > (?2, ?3, ?4)
AND (i.sub_at, i.job_no, i.seq + i.span) > (?2, ?3, ?5)
ORDER BY i.sub_at, i.job_no, i.seq`, toNanos(p.SubmittedBefore), k[0], k[1], spanFloor(k[2]), k[2])
		if err != nil {
			return fmt.Errorf("list submitted items: %w", err)
		}
		defer rows.Close()
		var m runMerger
		nos := map[string]int64{}
		for len(m.out) <= limit && rows.Next() {
			var (
				no    int64
				jobID string
			)
			r, err := scanRun(rows, &no, &jobID)
			if err != nil {
				return fmt.Errorf("list submitted items: %w", err)
			}
			nos[jobID] = no
			after := int64(-1 << 63)
			if r.st.subAt == k[0] && no == k[1] {
				after = k[2]
			}
			items, err := r.itemsAfter(jobID, after)
			if err != nil {
				return err
			}
			m.add([2]int64{r.st.subAt, no}, r.first(), items)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("list submitted items: %w", err)
		}
		if len(m.out) <= limit {
			m.flush()
		}
		res.Items = m.out
		if len(res.Items) > limit {
			res.Items = res.Items[:limit]
			last := res.Items[limit-1]
			res.NextCursor = encodeCursor("s", toNanos(last.SubmittedAt), nos[last.JobID], last.Seq)
		}
		return nil
	})
	if err != nil {
		return store.ListItemsResult{}, err
	}
	return res, nil
}

// terminal reports whether an item status ends the item.
func terminal(st store.ItemStatus) bool {
	return st == store.ItemConfirmed || st == store.ItemFailed || st == store.ItemAbandoned
}

// listItemsQuery is ListItems' statement for job number no: one index
// range per filter (ref, category, status, shard) from the first run that
// may hold items after seq after, so a page reads about a page of rows
// (runs) whatever the job's size. The rows come in seq order of their
// first item; ListItems reads as many as the page needs.
func listItemsQuery(p store.ListItemsParams, no, after int64) (string, []any, error) {
	q := `SELECT ` + runCols + ` FROM items i `
	// A run starting before after holds items after it only if its span
	// reaches past after: the rows of the runSpan before the cursor that
	// do not are left out before they are scanned and decoded.
	where := ` WHERE i.job_no = ? AND i.seq > ? AND i.seq + i.span > ?`
	args := []any{no, spanFloor(after), after}
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
	return q + where + ` ORDER BY i.seq`, args, nil
}

var _ store.ItemGetter = (*Store)(nil)

// GetItems reads items of a shard by seq: the run holding each.
func (s *Store) GetItems(ctx context.Context, p store.GetItemsParams) ([]store.Item, error) {
	if len(p.Seqs) > store.MaxPutItems {
		return nil, fmt.Errorf("get items: %w: %d seqs, at most %d", store.ErrInvalidArgument, len(p.Seqs), store.MaxPutItems)
	}
	items := []store.Item{}
	if len(p.Seqs) == 0 {
		return items, nil
	}
	seqs := slices.Clone(p.Seqs)
	slices.Sort(seqs)
	seqs = slices.Compact(seqs)
	err := s.read(ctx, func(tx *sql.Tx) error {
		no, err := s.jobNo(ctx, tx, p.JobID)
		if err != nil {
			return fmt.Errorf("get items: %w", err)
		}
		probe := func(args ...any) *sql.Row { return tx.QueryRowContext(ctx, qRunAt, args...) }
		var cur run
		for _, seq := range seqs {
			if cur.items == nil || seq > cur.last() {
				r, ok, err := runAt(probe, no, p.Shard, seq)
				if err != nil {
					return fmt.Errorf("get items of job %q: %w", p.JobID, err)
				}
				if !ok {
					continue
				}
				cur = r
			}
			if i := cur.indexOf(seq); i >= 0 {
				it, err := cur.item(p.JobID, cur.items[i])
				if err != nil {
					return err
				}
				items = append(items, it)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return items, nil
}
