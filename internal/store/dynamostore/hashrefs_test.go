package dynamostore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
)

// refJob stores a one-shard job of n items, item i with ref(i), the job
// record made as an older version wrote it when old is set.
func refJob(t *testing.T, s *dynamostore.Store, id string, n int, old bool, ref func(i int) string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.CreateJob(ctx, store.CreateJobParams{
		Job:    store.Job{ID: id, Tenant: "t", Total: int64(n), ShardCount: 1, CreatedAt: t0},
		Shards: []store.Shard{{Index: 0, Account: "a", Size: int64(n), SlowFactor: 1}},
	}); err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	if old {
		if err := s.MakeRefFormatOldForTest(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	items := make([]store.Item, n)
	for i := range items {
		items[i] = store.Item{JobID: id, Seq: int64(i), Account: "a", To: fmt.Sprint("u", i), Ref: ref(i)}
	}
	for start := 0; start < n; start += store.MaxPutItems {
		if err := s.PutItems(ctx, store.PutItemsParams{JobID: id, Items: items[start:min(start+store.MaxPutItems, n)]}); err != nil {
			t.Fatalf("PutItems: %v", err)
		}
	}
}

// listByRef lists every item of ref, following cursors.
func listByRef(t *testing.T, s *dynamostore.Store, jobID, ref string) []int64 {
	t.Helper()
	var seqs []int64
	cursor := ""
	for calls := 0; ; calls++ {
		res, err := s.ListItems(context.Background(), store.ListItemsParams{JobID: jobID, Ref: ref, Cursor: cursor, Limit: 5})
		if err != nil {
			t.Fatalf("ListItems(ref %q): %v", ref, err)
		}
		for _, it := range res.Items {
			if it.Ref != ref {
				t.Errorf("listing by ref %q gave item %d of ref %q", ref, it.Seq, it.Ref)
			}
			seqs = append(seqs, it.Seq)
		}
		if cursor = res.NextCursor; cursor == "" {
			return seqs
		}
		if calls > 100 {
			t.Fatalf("listing by ref %q does not end", ref)
		}
	}
}

// TestHashedRefsListEveryItemOfTheirRef: a job of 1,200 items whose refs
// are shared by 1 to 12 items, including two references with the same
// bucket and tag (their look-up entries cannot be told apart): listing by
// each reference gives exactly its items, and the job's look-up records
// are the hashed ones, 4 a block (3 blocks: at most 12 and their
// rewrites), not 16.
func TestHashedRefsListEveryItemOfTheirRef(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, dynamostore.Options{})
	a, b := collidingRefs(t)
	const n = 1200
	ref := func(i int) string {
		switch {
		case i%100 == 7:
			return a
		case i%100 == 8:
			return b
		}
		return fmt.Sprintf("order-%d", i/(1+i%12))
	}
	refJob(t, s, "hashed", n, false, ref)
	want := map[string][]int64{}
	for i := range n {
		want[ref(i)] = append(want[ref(i)], int64(i))
	}
	k := 0
	for r, seqs := range want {
		if k++; r != a && r != b && k%10 != 0 {
			continue // a sample: the listing of each takes a few calls
		}
		if got := listByRef(t, s, "hashed", r); fmt.Sprint(got) != fmt.Sprint(seqs) {
			t.Errorf("ref %q lists %v, want %v", r, got, seqs)
		}
	}
	if got := listByRef(t, s, "hashed", "no-such-ref"); len(got) != 0 {
		t.Errorf("an unknown ref lists %v", got)
	}
	hashed, err := s.CountRecordsForTest(ctx, "hashed", "H#")
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.CountRecordsForTest(ctx, "hashed", "R#")
	if err != nil {
		t.Fatal(err)
	}
	if hashed == 0 || hashed > 12 || old != 0 {
		t.Errorf("%d hashed and %d R# look-up records, want at most 12 hashed (3 blocks × 4) and no R#", hashed, old)
	}
}

// TestRefsOfJobsBeforeHashedRecords: a job whose record has no rf (made
// by an earlier version, mid-way through its snapshot at the upgrade)
// keeps writing and reading R# look-up records.
func TestRefsOfJobsBeforeHashedRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, dynamostore.Options{})
	ref := func(i int) string { return fmt.Sprintf("order-%d", i/3) }
	refJob(t, s, "old", 600, true, ref)
	for _, r := range []string{"order-0", "order-101", "order-199"} {
		var want []int64
		for i := range 600 {
			if ref(i) == r {
				want = append(want, int64(i))
			}
		}
		if got := listByRef(t, s, "old", r); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ref %q lists %v, want %v", r, got, want)
		}
	}
	if n, err := s.CountRecordsForTest(ctx, "old", "H#"); err != nil || n != 0 {
		t.Errorf("%d hashed look-up records (%v) for a job of the R# format", n, err)
	}
	if n, err := s.CountRecordsForTest(ctx, "old", "R#"); err != nil || n == 0 {
		t.Errorf("%d R# look-up records (%v), want them", n, err)
	}
}

// collidingRefs finds two references with the same bucket and tag.
func collidingRefs(t *testing.T) (string, string) {
	t.Helper()
	type place struct {
		bucket int
		tag    uint32
	}
	seen := map[place]string{}
	for i := range 1 << 20 {
		r := fmt.Sprintf("collide-%d", i)
		b, tag := dynamostore.RefHashForTest(r)
		if other, ok := seen[place{b, tag}]; ok {
			return other, r
		}
		seen[place{b, tag}] = r
	}
	t.Fatal("no two references with the same bucket and tag")
	return "", ""
}
