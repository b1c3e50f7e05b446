package storetest

import (
	"maps"
	"testing"

	"github.com/qunfa/qunfa/internal/store"
)

func TestFailureCategory(t *testing.T) {
	t.Parallel()
	e := func(c string) *store.ItemError { return &store.ItemError{Category: c} }
	tests := []struct {
		status  store.ItemStatus
		err     *store.ItemError
		want    string
		counted bool
	}{
		{store.ItemPending, nil, "", false},
		{store.ItemPending, e(store.CategoryRetryable), "", false},
		{store.ItemPending, e(store.CategoryUncertain), "", false},
		{store.ItemSubmitted, nil, "", false},
		{store.ItemSubmitted, e(store.CategoryRetryable), store.CategoryRetryable, false},
		{store.ItemSubmitted, e(store.CategoryUncertain), store.CategoryUncertain, true},
		{store.ItemConfirmed, e(store.CategoryUncertain), "", false},
		{store.ItemFailed, e(store.CategoryPermanent), store.CategoryPermanent, true},
		{store.ItemFailed, nil, "", false},
		{store.ItemFailed, e(""), "", false},
		{store.ItemAbandoned, e(store.CategoryCancelled), store.CategoryCancelled, true},
	}
	for _, tc := range tests {
		got, counted := FailureCategory(store.Item{Status: tc.status, Error: tc.err})
		if counted != tc.counted || (counted && got != tc.want) {
			t.Errorf("FailureCategory(%s, %+v) = %q, %v; want %q, %v", tc.status, tc.err, got, counted, tc.want, tc.counted)
		}
	}
}

func TestRecount(t *testing.T) {
	t.Parallel()
	items := []store.Item{
		{Status: store.ItemPending},
		{Status: store.ItemPending, Error: &store.ItemError{Category: store.CategoryRetryable}},
		{Status: store.ItemSubmitted, Error: &store.ItemError{Category: store.CategoryUncertain}},
		{Status: store.ItemConfirmed},
		{Status: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryExhausted}},
		{Status: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryExhausted}},
	}
	c, f := Recount(items)
	if want := (store.Counts{Pending: 2, Submitted: 1, Confirmed: 1, Failed: 1, Abandoned: 1}); c != want {
		t.Errorf("counts %+v, want %+v", c, want)
	}
	if want := map[string]int64{store.CategoryUncertain: 1, store.CategoryExhausted: 2}; !maps.Equal(f, want) {
		t.Errorf("failures %v, want %v", f, want)
	}
}

func TestNewJob(t *testing.T) {
	t.Parallel()
	p, items := NewJob("tenant-a", 3, 4)
	q, _ := NewJob("tenant-a", 3, 4)
	if p.Job.ID == q.Job.ID || p.Job.IdempotencyKey == q.Job.IdempotencyKey {
		t.Fatalf("two fixtures share an id or key: %s", p.Job.ID)
	}
	if p.Job.Total != 12 || p.Job.ShardCount != 3 || len(p.Shards) != 3 || len(items) != 12 {
		t.Fatalf("job %+v with %d shards, %d items", p.Job, len(p.Shards), len(items))
	}
	perShard := map[int]int64{}
	for i, it := range items {
		if it.Seq != int64(i+1) || it.Shard != i%3 || it.Account != p.Shards[it.Shard].Account || it.JobID != p.Job.ID {
			t.Fatalf("item %d = %+v", i, it)
		}
		perShard[it.Shard]++
	}
	for _, sh := range p.Shards {
		if perShard[sh.Index] != sh.Size || sh.Counts.Total() != sh.Size || sh.Counts.Pending != sh.Size {
			t.Fatalf("shard %d: size %d, counts %+v, %d items", sh.Index, sh.Size, sh.Counts, perShard[sh.Index])
		}
	}
}
