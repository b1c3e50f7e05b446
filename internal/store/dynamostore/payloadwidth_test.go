package dynamostore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// putJobOf creates a job of n items (seq i in shard i % 2) with refs from
// ref, and writes them in PutItems calls of store.MaxPutItems; with
// legacy, the job record is made as jobs created before payload widths
// were (no dw) before any item is written.
func putJobOf(t *testing.T, s *dynamostore.Store, n int, ref func(int64) string, legacy bool) (string, []store.Item) {
	t.Helper()
	ctx := context.Background()
	jobID := fmt.Sprintf("dw-%d", time.Now().UnixNano())
	if _, err := s.CreateJob(ctx, store.CreateJobParams{
		Job: store.Job{ID: jobID, Tenant: "t", IdempotencyKey: jobID, RequestHash: "h", Total: int64(n), ShardCount: 2,
			CreatedAt: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)},
		Shards: []store.Shard{{Index: 0, Account: "a", Size: int64(n - n/2)}, {Index: 1, Account: "a", Size: int64(n / 2)}},
	}); err != nil {
		t.Fatal(err)
	}
	if legacy {
		if err := s.RemoveJobDataWidthForTest(ctx, jobID); err != nil {
			t.Fatal(err)
		}
	}
	items := make([]store.Item, n)
	for i := range items {
		items[i] = store.Item{JobID: jobID, Shard: i % 2, Seq: int64(i), Account: "a",
			To: fmt.Sprintf("user-%06d", i), Vars: map[string]string{"name": fmt.Sprintf("Name %d", i)}, Ref: ref(int64(i))}
	}
	for start := 0; start < n; start += store.MaxPutItems {
		if err := s.PutItems(ctx, store.PutItemsParams{JobID: jobID, Items: items[start:min(start+store.MaxPutItems, n)]}); err != nil {
			t.Fatalf("PutItems: %v", err)
		}
	}
	return jobID, items
}

// checkPayloads lists every item of the job and compares its to, vars and
// ref with what was put.
func checkPayloads(t *testing.T, s *dynamostore.Store, jobID string, want []store.Item) {
	t.Helper()
	got := map[int64]store.Item{}
	cursor := ""
	for {
		res, err := s.ListItems(context.Background(), store.ListItemsParams{JobID: jobID, Cursor: cursor, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range res.Items {
			got[it.Seq] = it
		}
		if cursor = res.NextCursor; cursor == "" {
			break
		}
	}
	for _, w := range want {
		g := got[w.Seq]
		if g.To != w.To || g.Ref != w.Ref || g.Vars["name"] != w.Vars["name"] {
			t.Fatalf("item %d read back as to %q ref %q vars %v, want %q %q %v", w.Seq, g.To, g.Ref, g.Vars, w.To, w.Ref, w.Vars)
		}
	}
}

// TestPayloadRecordsSizedByBytes: a job's payload records are as wide as
// its items make cheapest, each ending short of a whole KB (1 KB for the
// mock's data, where 64 items took half a write unit; 19-digit random
// references, where 64 items passed 1 KB and took two units, now 4 KB for
// about 200), no more write units per item than records of 64 items, and
// every item reads back from them; a job made before (no width on its
// record) keeps records of 64 and reads back the same.
func TestPayloadRecordsSizedByBytes(t *testing.T) {
	t.Parallel()
	s := newStore(t, dynamostore.Options{})
	ctx := context.Background()
	cases := []struct {
		name     string
		ref      func(int64) string
		narrower bool // records of 64 waste most of a unit: sized ones cost less per item
	}{
		{"mock data", func(int64) string { return "" }, true},
		{"19-digit random references", realRef, true},
		{"UUID references", uuidRef, false},
	}
	const n = 1200
	for _, c := range cases {
		jobID, items := putJobOf(t, s, n, c.ref, false)
		sizes, width, err := s.PayloadRecordsForTest(ctx, jobID)
		if err != nil {
			t.Fatal(err)
		}
		units := 0
		for _, sz := range sizes {
			units += (sz + 1023) / 1024
			if sz > 4096 {
				t.Errorf("%s: a payload record of %d bytes, want ≤ 4 KB (one read unit)", c.name, sz)
			}
			if sz%1024 > 1024-16 {
				t.Errorf("%s: a payload record of %d bytes, a few bytes short of the next unit: no margin", c.name, sz)
			}
		}
		if want := (n + int(width) - 1) / int(width); width < 8 || width > 256 || len(sizes) != want {
			t.Errorf("%s: width %d, %d records; want 8..256 and %d records", c.name, width, len(sizes), want)
		}
		legacyID, _ := putJobOf(t, s, n, c.ref, true)
		legacySizes, legacyWidth, err := s.PayloadRecordsForTest(ctx, legacyID)
		if err != nil {
			t.Fatal(err)
		}
		legacyUnits := 0
		for _, sz := range legacySizes {
			legacyUnits += (sz + 1023) / 1024
		}
		if legacyWidth != 64 || len(legacySizes) != (n+63)/64 {
			t.Errorf("%s, job made before: width %d, %d records; want 64 and %d", c.name, legacyWidth, len(legacySizes), (n+63)/64)
		}
		t.Logf("%s: width %d, %d payload records, %.4f write units per item (64 per record: %.4f)",
			c.name, width, len(sizes), float64(units)/n, float64(legacyUnits)/n)
		if units > legacyUnits || (c.narrower && units >= legacyUnits) {
			t.Errorf("%s: %d write units for %d items, records of 64: %d", c.name, units, n, legacyUnits)
		}
		checkPayloads(t, s, jobID, items)
		checkPayloads(t, s, legacyID, items)
	}
}
