package sqlitestore

import (
	"context"
	"database/sql"
	"strings"
)

// multiRow is a statement that writes many rows at once, prepared for
// each size of rowSizes: a job's items are written by the hundred
// (planning's pages, a packed call's outcomes), and a statement per item
// spends as much time binding, stepping and opening cursors as in the
// B-trees. The parameters are anonymous: the driver looks each numbered
// one up by name, a cost that grows with their count.
type multiRow struct {
	args    int            // parameters per row
	queries map[int]string // by rows written
}

// rowSizes are the sizes multiRow statements are prepared for, largest
// first: n rows take the fewest statements of these sizes (80: 64 + 16).
var rowSizes = []int{128, 64, 32, 16, 8, 4, 2, 1}

// newMultiRow is the statement head + rows × row + tail, row having args
// anonymous parameters, separated by commas.
func newMultiRow(head, row, tail string, args int) multiRow {
	m := multiRow{args: args, queries: map[int]string{}}
	for _, n := range rowSizes {
		m.queries[n] = head + strings.Repeat(row+",\n", n-1) + row + tail
	}
	return m
}

// exec writes the rows whose parameters are args, m.args per row, in as
// few statements as rowSizes allow, each followed by the parameters of
// tail.
func (s *Store) execRows(ctx context.Context, tx *sql.Tx, m multiRow, args []any, tail ...any) error {
	buf := make([]any, 0, rowSizes[0]*m.args+len(tail))
	for len(args) > 0 {
		rows := len(args) / m.args
		n := rowSizes[len(rowSizes)-1]
		for _, size := range rowSizes {
			if size <= rows {
				n = size
				break
			}
		}
		buf = append(append(buf[:0], args[:n*m.args]...), tail...)
		args = args[n*m.args:]
		if _, err := s.stmt(ctx, tx, m.queries[n]).ExecContext(ctx, buf...); err != nil {
			return err
		}
	}
	return nil
}

// itemInserts writes new items (PutItems): job number, shard, seq,
// account, to, vars and ref per item. A rewritten item replaces the old.
var itemInserts = newMultiRow(`INSERT OR REPLACE INTO items
(job_no, shard, seq, status, attempts, next_at, sub_at, claim, cat, code, msg, account, to_id, vars, ref)
VALUES `, "(?, ?, ?, 0, 0, 0, 0, '', NULL, NULL, NULL, ?, ?, ?, ?)", "", 7)

// itemWrites writes the mutable part of items of one shard (UpdateItems):
// seq, status, attempts, next_at, cat, code, msg, fin_at and msgid per
// item, then the job number and the shard. OR FAIL: a statement that
// writes many rows and might abort halfway keeps a journal of every page
// it touches to undo itself, and store.write rolls the whole transaction
// back on any error anyway.
var itemWrites = newMultiRow(`UPDATE OR FAIL items SET status = v.column2, attempts = v.column3, next_at = v.column4,
cat = v.column5, code = v.column6, msg = v.column7, fin_at = v.column8, msgid = v.column9
FROM (VALUES `, "(?, ?, ?, ?, ?, ?, ?, ?, ?)", `) AS v
WHERE items.job_no = ? AND items.shard = ? AND items.seq = v.column1`, 9)
