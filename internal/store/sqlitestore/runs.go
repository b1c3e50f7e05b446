package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/qunfa/qunfa/internal/store"
)

// A row of items holds a run: up to runMax consecutive items of one shard
// (consecutive in the shard's seq order) that share their whole state —
// status, attempts, next-attempt and claim times, claim, error, finish
// time, account, and no ref (an item with a ref is a run of one). The row
// key is (job, shard, first seq); n is the run's length and span its last
// seq less its first. What differs per item (seq, to, vars, message id)
// is in body (encodeBody). A row written before runs (schema 19) has no
// body: it is a run of one whose to, vars and message id are in to_id,
// vars and msgid.
//
// The span is at most runSpan, so the runs holding seqs from s on start
// after s − runSpan: a listing in seq order reads the rows from there and
// merges the runs of different shards, whose seqs interleave (runMerger).
const (
	runMax  = 128
	runSpan = 4096
)

// runState is what the items of a run share.
type runState struct {
	status   int
	attempts int
	nextAt   int64
	subAt    int64
	claim    string
	hasErr   bool
	cat      string
	code     string
	msg      string
	finAt    int64
	account  string
	ref      string
}

// entry is what an item of a run has of its own. vars is the item's
// variables as encodeVars encodes them ("" when it has none).
type entry struct {
	seq   int64
	to    string
	vars  string
	msgID string
}

// run is one row of items.
type run struct {
	shard int
	st    runState
	items []entry // in seq order; items[0].seq is the row key
	raw   rawRun  // the row's body while items is nil (scanRunLazy)
}

func (r *run) first() int64 { return r.items[0].seq }
func (r *run) last() int64  { return r.items[len(r.items)-1].seq }

// flat is an item of a run with the run's state, as runs are split and
// formed again.
type flat struct {
	st runState
	e  entry
}

func (r *run) flatten(out []flat) []flat {
	for _, e := range r.items {
		out = append(out, flat{st: r.st, e: e})
	}
	return out
}

// formRuns groups items of one shard, in seq order, into runs: each run
// the longest stretch of consecutive items with equal state, at most
// runMax items and runSpan seqs; an item with a ref is a run of its own.
func formRuns(shard int, items []flat) []run {
	var out []run
	for i := 0; i < len(items); {
		r := run{shard: shard, st: items[i].st, items: []entry{items[i].e}}
		j := i + 1
		if r.st.ref == "" {
			for j < len(items) && items[j].st == r.st && len(r.items) < runMax && items[j].e.seq-r.first() <= runSpan {
				r.items = append(r.items, items[j].e)
				j++
			}
		}
		out = append(out, r)
		i = j
	}
	return out
}

// encodeBody encodes a run's items: per item the uvarint distance of its
// seq from the previous one (from the first: 0), then the lengths
// (uvarint) and bytes of to, vars and the message id.
func encodeBody(items []entry) []byte {
	n := 0
	for _, e := range items {
		n += 4 + len(e.to) + len(e.vars) + len(e.msgID)
	}
	b := make([]byte, 0, n+2*len(items))
	prev := items[0].seq
	for _, e := range items {
		b = binary.AppendUvarint(b, uint64(e.seq-prev))
		prev = e.seq
		b = appendBytes(b, e.to)
		b = appendBytes(b, e.vars)
		b = appendBytes(b, e.msgID)
	}
	return b
}

func appendBytes(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

var errCorruptRun = errors.New("corrupt run of items")

// decodeBody decodes the n items of a run whose first seq is first.
func decodeBody(first int64, n int, b []byte) ([]entry, error) {
	if n <= 0 || n > runMax {
		return nil, fmt.Errorf("%w: %d items", errCorruptRun, n)
	}
	out := make([]entry, 0, n)
	seq := first
	for i := 0; i < n; i++ {
		d, k := binary.Uvarint(b)
		if k <= 0 || (i == 0 && d != 0) || (i > 0 && (d == 0 || d > runSpan)) {
			return nil, fmt.Errorf("%w at item %d of %d", errCorruptRun, i, first)
		}
		b = b[k:]
		seq += int64(d)
		e := entry{seq: seq}
		var ok bool
		if e.to, b, ok = readBytes(b); !ok {
			return nil, fmt.Errorf("%w at item %d of %d", errCorruptRun, i, first)
		}
		if e.vars, b, ok = readBytes(b); !ok {
			return nil, fmt.Errorf("%w at item %d of %d", errCorruptRun, i, first)
		}
		if e.msgID, b, ok = readBytes(b); !ok {
			return nil, fmt.Errorf("%w at item %d of %d", errCorruptRun, i, first)
		}
		out = append(out, e)
	}
	if len(b) != 0 || seq-first > runSpan {
		return nil, fmt.Errorf("%w: %d items of %d", errCorruptRun, n, first)
	}
	return out, nil
}

func readBytes(b []byte) (string, []byte, bool) {
	l, k := binary.Uvarint(b)
	if k <= 0 || l > uint64(len(b)-k) {
		return "", nil, false
	}
	return string(b[k : k+int(l)]), b[k+int(l):], true
}

// runCols are the columns scanRun reads, of items aliased i.
const runCols = `i.shard, i.seq, i.n, i.span, i.status, i.attempts, i.next_at, i.sub_at, i.claim,
i.cat, i.code, i.msg, i.account, i.ref, i.fin_at, i.to_id, i.vars, i.msgid, i.body`

// scanRun scans runCols (then extra columns into extra).
func scanRun(row interface{ Scan(...any) error }, extra ...any) (run, error) {
	r, err := scanRunLazy(row, extra...)
	if err != nil || r.items != nil {
		return r, err
	}
	items, err := decodeBody(r.raw.first, r.raw.n, r.raw.body)
	if err != nil {
		return r, err
	}
	if items[len(items)-1].seq-r.raw.first != r.raw.span {
		return r, fmt.Errorf("%w: run of %d spans %d, body says %d", errCorruptRun, r.raw.first, r.raw.span, items[len(items)-1].seq-r.raw.first)
	}
	r.items = items
	return r, nil
}

// rawRun is a run's row as stored: its items not decoded.
type rawRun struct {
	first int64
	n     int
	span  int64
	body  []byte
}

// scanRunLazy scans runCols like scanRun but leaves a body in r.raw,
// decoded by no one yet (r.items is nil; a row without a body, a run of
// one, is decoded).
func scanRunLazy(row interface{ Scan(...any) error }, extra ...any) (run, error) {
	var (
		r                   run
		first               int64
		n                   int
		span                int64
		cat, code, msg, ref sql.NullString
		to                  string
		vars, msgID         sql.NullString
		body                []byte
	)
	dest := append([]any{&r.shard, &first, &n, &span, &r.st.status, &r.st.attempts, &r.st.nextAt, &r.st.subAt, &r.st.claim,
		&cat, &code, &msg, &r.st.account, &ref, &r.st.finAt, &to, &vars, &msgID, &body}, extra...)
	if err := row.Scan(dest...); err != nil {
		return r, err
	}
	r.st.hasErr, r.st.cat, r.st.code, r.st.msg = cat.Valid, cat.String, code.String, msg.String
	r.st.ref = ref.String
	if body == nil {
		if n != 1 || span != 0 {
			return r, fmt.Errorf("%w: %d items of %d without a body", errCorruptRun, n, first)
		}
		e := entry{seq: first, to: to, msgID: msgID.String}
		if vars.String != "" {
			// Before runs, vars were JSON.
			var m map[string]string
			if err := json.Unmarshal([]byte(vars.String), &m); err != nil {
				return r, fmt.Errorf("decode vars of item %d: %w", first, err)
			}
			e.vars = encodeVars(m)
		}
		r.items = []entry{e}
		return r, nil
	}
	if n <= 0 || n > runMax || span < 0 || span > runSpan {
		return r, fmt.Errorf("%w: %d items of %d spanning %d", errCorruptRun, n, first, span)
	}
	r.raw = rawRun{first: first, n: n, span: span, body: body}
	return r, nil
}

// split splits the body of a run not decoded into its first k items
// (0 < k < n), decoded, with their body, and the body of the rest, whose
// first seq is restFirst: the bytes are cut, not encoded again.
func (raw rawRun) split(k int) (head []entry, headBody []byte, restFirst int64, restBody []byte, err error) {
	b := raw.body
	head = make([]entry, 0, k)
	seq, pos := raw.first, 0
	for i := 0; i <= k; i++ {
		d, dl := binary.Uvarint(b[pos:])
		if dl <= 0 || (i == 0 && d != 0) || (i > 0 && (d == 0 || d > runSpan)) {
			return nil, nil, 0, nil, fmt.Errorf("%w at item %d of %d", errCorruptRun, i, raw.first)
		}
		seq += int64(d)
		if i == k {
			rest := make([]byte, 0, 1+len(b)-pos-dl)
			rest = append(append(rest, 0), b[pos+dl:]...)
			return head, b[:pos], seq, rest, nil
		}
		e := entry{seq: seq}
		q := b[pos+dl:]
		var ok bool
		if e.to, q, ok = readBytes(q); ok {
			if e.vars, q, ok = readBytes(q); ok {
				e.msgID, q, ok = readBytes(q)
			}
		}
		if !ok {
			return nil, nil, 0, nil, fmt.Errorf("%w at item %d of %d", errCorruptRun, i, raw.first)
		}
		pos = len(b) - len(q)
		head = append(head, e)
	}
	panic("unreachable")
}

// item is the store's view of e, an item of r, of job jobID.
func (r *run) item(jobID string, e entry) (store.Item, error) {
	it := store.Item{
		JobID:         jobID,
		Shard:         r.shard,
		Seq:           e.seq,
		Account:       r.st.account,
		To:            e.to,
		Ref:           r.st.ref,
		Status:        statusNames[r.st.status],
		Attempts:      r.st.attempts,
		NextAttemptAt: fromNanos(r.st.nextAt),
		SubmittedAt:   fromNanos(r.st.subAt),
		FinishedAt:    fromNanos(r.st.finAt),
		MsgID:         e.msgID,
		ClaimID:       r.st.claim,
	}
	if r.st.hasErr {
		it.Error = &store.ItemError{Category: r.st.cat, Code: r.st.code, Message: r.st.msg}
	}
	vars, err := decodeVars(e.vars)
	if err != nil {
		return it, fmt.Errorf("decode vars of item %d: %w", e.seq, err)
	}
	it.Vars = vars
	return it, nil
}

// encodeVars encodes an item's variables: the uvarint count of pairs,
// then each key and value as appendBytes writes them ("" for none).
func encodeVars(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	n := binary.MaxVarintLen64
	for k, v := range m {
		n += 4 + len(k) + len(v)
	}
	b := binary.AppendUvarint(make([]byte, 0, n), uint64(len(m)))
	for k, v := range m {
		b = appendBytes(appendBytes(b, k), v)
	}
	return string(b)
}

// decodeVars decodes what encodeVars encoded (nil for "").
func decodeVars(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	b := []byte(s)
	n, k := binary.Uvarint(b)
	if k <= 0 || n == 0 || n > uint64(len(b)) {
		return nil, errCorruptRun
	}
	b = b[k:]
	m := make(map[string]string, n)
	for range n {
		key, rest, ok := readBytes(b)
		if !ok {
			return nil, errCorruptRun
		}
		var v string
		if v, b, ok = readBytes(rest); !ok {
			return nil, errCorruptRun
		}
		m[key] = v
	}
	if len(b) != 0 {
		return nil, errCorruptRun
	}
	return m, nil
}

// Statements on runs, prepared on the write connection.
const (
	// qRunPut writes a run, replacing the row of the same key.
	qRunPut = `INSERT INTO items (job_no, shard, seq, n, span, status, attempts, next_at, sub_at, claim,
cat, code, msg, account, to_id, vars, ref, fin_at, msgid, body)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, '', NULL, ?15, ?16, NULL, ?17)
ON CONFLICT (job_no, shard, seq) DO UPDATE SET n = excluded.n, span = excluded.span, status = excluded.status,
attempts = excluded.attempts, next_at = excluded.next_at, sub_at = excluded.sub_at, claim = excluded.claim,
cat = excluded.cat, code = excluded.code, msg = excluded.msg, account = excluded.account, to_id = '',
vars = NULL, ref = excluded.ref, fin_at = excluded.fin_at, msgid = NULL, body = excluded.body`
	// qRunDelete deletes the run of a key.
	qRunDelete = `DELETE FROM items WHERE job_no = ?1 AND shard = ?2 AND seq = ?3`
	// qRunAt reads the run of a shard that starts last at or before seq
	// ?3: the run holding ?3, if any.
	qRunAt = `SELECT ` + runCols + ` FROM items i WHERE i.job_no = ?1 AND i.shard = ?2 AND i.seq <= ?3
ORDER BY i.seq DESC LIMIT 1`
	// qRunsFrom reads the runs of a shard starting in [?3, ?4] in seq
	// order.
	qRunsFrom = `SELECT ` + runCols + ` FROM items i WHERE i.job_no = ?1 AND i.shard = ?2 AND i.seq BETWEEN ?3 AND ?4
ORDER BY i.seq`
	// qClaimRuns reads the due pending runs of a shard in seq order, at
	// most ?4 (a claim takes at most as many runs as items).
	qClaimRuns = `SELECT ` + runCols + ` FROM items i INDEXED BY items_claim
WHERE i.job_no = ?1 AND i.shard = ?2 AND i.status = 0 AND i.next_at <= ?3 ORDER BY i.seq LIMIT ?4`
)

// putRun writes r as the row of its first seq.
func (s *Store) putRun(ctx context.Context, tx *sql.Tx, no int64, r *run) error {
	var cat, code, msg any
	if r.st.hasErr {
		cat, code, msg = r.st.cat, r.st.code, r.st.msg
	}
	_, err := s.stmt(ctx, tx, qRunPut).ExecContext(ctx, no, r.shard, r.first(), len(r.items), r.last()-r.first(),
		r.st.status, r.st.attempts, r.st.nextAt, r.st.subAt, r.st.claim, cat, code, msg, r.st.account,
		nullString(r.st.ref), r.st.finAt, encodeBody(r.items))
	return err
}

// putRawRun writes the run raw of a shard in state st, whose body
// is encoded already.
func (s *Store) putRawRun(ctx context.Context, tx *sql.Tx, no int64, shard int, st runState, raw rawRun) error {
	var cat, code, msg any
	if st.hasErr {
		cat, code, msg = st.cat, st.code, st.msg
	}
	_, err := s.stmt(ctx, tx, qRunPut).ExecContext(ctx, no, shard, raw.first, raw.n, raw.span,
		st.status, st.attempts, st.nextAt, st.subAt, st.claim, cat, code, msg, st.account,
		nullString(st.ref), st.finAt, raw.body)
	return err
}

func (s *Store) deleteRun(ctx context.Context, tx *sql.Tx, no int64, shard int, first int64) error {
	_, err := s.stmt(ctx, tx, qRunDelete).ExecContext(ctx, no, shard, first)
	return err
}

// runAt reads, with probe (qRunAt on a transaction), the run of a shard
// holding seq; ok is false if none does. The run may not hold seq itself
// (runs skip other shards' seqs): find it with indexOf.
func runAt(probe func(args ...any) *sql.Row, no int64, shard int, seq int64) (run, bool, error) {
	r, err := scanRun(probe(no, shard, seq))
	if errors.Is(err, sql.ErrNoRows) || (err == nil && r.last() < seq) {
		return run{}, false, nil
	}
	if err != nil {
		return run{}, false, err
	}
	return r, true, nil
}

// indexOf is the index of seq among r's items, or -1.
func (r *run) indexOf(seq int64) int {
	i, ok := slices.BinarySearchFunc(r.items, seq, func(e entry, s int64) int { return cmpInt(e.seq, s) })
	if !ok {
		return -1
	}
	return i
}

// spanFloor is the lowest first seq of a run that may hold seqs after
// after.
func spanFloor(after int64) int64 {
	if after < -1<<63+runSpan {
		return after
	}
	return after - runSpan
}

// runMerger turns runs read in order of (group, first seq) — runs of
// different shards interleave in seq space — into their items in order of
// (group, seq). Runs span at most runSpan seqs, so few are held at once.
type runMerger struct {
	held  []store.Item // in seq order, of the current group
	group [2]int64
	out   []store.Item
}

// add takes the items (in seq order) of the next run, of group g, whose
// first seq is first: every held item before first comes out first.
func (m *runMerger) add(g [2]int64, first int64, items []store.Item) {
	if g != m.group {
		m.flush()
		m.group = g
	} else {
		i := 0
		for i < len(m.held) && m.held[i].Seq < first {
			i++
		}
		m.out = append(m.out, m.held[:i]...)
		m.held = m.held[i:]
	}
	if len(m.held) == 0 {
		m.held = append(m.held[:0:0], items...)
		return
	}
	merged := make([]store.Item, 0, len(m.held)+len(items))
	a, b := m.held, items
	for len(a) > 0 && len(b) > 0 {
		if a[0].Seq < b[0].Seq {
			merged, a = append(merged, a[0]), a[1:]
		} else {
			merged, b = append(merged, b[0]), b[1:]
		}
	}
	m.held = append(append(merged, a...), b...)
}

// flush lets every held item out (no run follows in the group).
func (m *runMerger) flush() {
	m.out = append(m.out, m.held...)
	m.held = m.held[:0]
}
