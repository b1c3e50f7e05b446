package sqlitestore

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

// TestClaimPlans: a claim and its next-due look-ups search the partial
// indexes of pending runs from the shard on (items_claim in seq order,
// items_due by next-attempt time, which holds no fresh item), never the
// shard's rows, so their cost is what is pending, not what was sent; an
// update finds the run holding a seq by one probe of the primary key.
func TestClaimPlans(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "store.db"))
	cases := []struct {
		name string
		q    string
		args []any
		want string
	}{
		{"claim", qClaimRuns, []any{1, 0, 1, 10}, "SEARCH i USING INDEX items_claim (job_no=? AND shard=?)"},
		{"run at", qRunAt, []any{1, 0, 5}, "SEARCH i USING PRIMARY KEY (job_no=? AND shard=? AND seq<?)"},
		{"runs from", qRunsFrom, []any{1, 0, 5, 9}, "SEARCH i USING PRIMARY KEY (job_no=? AND shard=? AND seq>? AND seq<?)"},
		{"next due", qNextDue, []any{1, 0}, "SEARCH items USING COVERING INDEX items_due (job_no=? AND shard=? AND next_at>?)"},
		{"more due", qMoreDue, []any{1, 0, 5, 1}, "SEARCH items USING COVERING INDEX items_claim (job_no=? AND shard=? AND seq>?)"},
	}
	var def string
	if err := s.w.QueryRowContext(t.Context(), `SELECT sql FROM sqlite_master WHERE name = 'items_due'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(def, "WHERE status = 0 AND next_at > 0") {
		t.Errorf("items_due is %q: fresh items (next_at 0) would cost it a write at planning and at their claim", def)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan := queryPlan(t, s, c.q, c.args...)
			whole := strings.Join(plan, "\n")
			if !strings.Contains(whole, c.want) {
				t.Errorf("plan %q, want %q", plan, c.want)
			}
			if strings.Contains(whole, "SCAN items") || strings.Contains(whole, "SCAN i ") || strings.Contains(whole, "TEMP B-TREE") {
				t.Errorf("plan %q scans or sorts items", plan)
			}
		})
	}
}

// queryPlan is SQLite's EXPLAIN QUERY PLAN of q on the store: the detail
// of each step, in order.
func queryPlan(t *testing.T, s *Store, q string, args ...any) []string {
	t.Helper()
	var plan []string
	err := s.read(t.Context(), func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				return err
			}
			plan = append(plan, detail)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatalf("EXPLAIN QUERY PLAN: %v", err)
	}
	return plan
}
