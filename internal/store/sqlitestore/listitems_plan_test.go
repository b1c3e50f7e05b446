package sqlitestore

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/qunfa/qunfa/internal/store"
)

// TestListItemsFilterPlans: every filter of a job's items listing is an
// index range that starts at the job and the filtered value (status,
// category, ref, shard) and walks seq, so a page reads about a page of
// rows however large the job: SQLite's plan searches the index with the
// filter in its key, never scans the job's items.
func TestListItemsFilterPlans(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "store.db"))
	shard := 3
	cases := []struct {
		name  string
		p     store.ListItemsParams
		index string
		key   string
	}{
		{"pending", store.ListItemsParams{Status: store.ItemPending}, "items_status", "job_no=? AND status=? AND seq>?"},
		{"submitted", store.ListItemsParams{Status: store.ItemSubmitted}, "items_status", "job_no=? AND status=? AND seq>?"},
		{"confirmed", store.ListItemsParams{Status: store.ItemConfirmed}, "items_status", "job_no=? AND status=? AND seq>?"},
		{"failed", store.ListItemsParams{Status: store.ItemFailed}, "items_failed", "job_no=? AND status=? AND seq>?"},
		{"abandoned", store.ListItemsParams{Status: store.ItemAbandoned}, "items_failed", "job_no=? AND status=? AND seq>?"},
		{"category", store.ListItemsParams{Category: "permanent"}, "items_category", "job_no=? AND cat=? AND seq>?"},
		{"ref", store.ListItemsParams{Ref: "r1"}, "items_ref", "job_no=? AND ref=? AND seq>?"},
		{"shard", store.ListItemsParams{Shard: &shard, Status: store.ItemPending}, "PRIMARY KEY", "job_no=? AND shard=? AND seq>?"},
		{"none", store.ListItemsParams{}, "items_seq", "job_no=? AND seq>?"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, args, err := listItemsQuery(c.p, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			plan := queryPlan(t, s, q, args...)
			var items string
			for _, d := range plan {
				if strings.HasPrefix(d, "SEARCH i ") || strings.HasPrefix(d, "SCAN i") {
					items = d
				}
			}
			if !strings.Contains(items, c.index) || !strings.Contains(items, "("+c.key+")") {
				t.Errorf("plan of %+v reads items by %q, want a search of %s (%s); whole plan %q", c.p, items, c.index, c.key, plan)
			}
			if strings.Contains(strings.Join(plan, "\n"), "TEMP B-TREE") {
				t.Errorf("plan of %+v sorts (%q): the page is not read in seq order", c.p, plan)
			}
		})
	}
}
