package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// testGetItemsFullBatch: the reconciler reads the items of a provider call
// — up to store.MaxPutItems — in one GetItems; a full batch is read, not
// refused.
func testGetItemsFullBatch(t *testing.T, s store.Store, _ Capabilities) {
	g, ok := s.(store.ItemGetter)
	if !ok {
		t.Fatal("the adapter does not implement store.ItemGetter")
	}
	p, _ := runningJob(t, s, "tenant-a", 1, store.MaxPutItems)
	seqs := make([]int64, store.MaxPutItems)
	for i := range seqs {
		seqs[i] = int64(len(seqs) - i) // in no particular order
	}
	got, err := g.GetItems(ctxOf(t), store.GetItemsParams{JobID: p.Job.ID, Shard: 0, Seqs: seqs})
	if err != nil {
		t.Fatalf("GetItems(%d seqs): %v", len(seqs), err)
	}
	if len(got) != store.MaxPutItems {
		t.Fatalf("GetItems(%d seqs) = %d items, want all", len(seqs), len(got))
	}
	for i, it := range got {
		if it.Seq != int64(i+1) || it.To != fmt.Sprintf("user-%d", i+1) || it.Status != store.ItemPending {
			t.Fatalf("item %d of %d = seq %d to %q %s, want seq %d of user-%d, pending", i, len(got), it.Seq, it.To, it.Status, i+1, i+1)
		}
	}
}

// testUpdateItemsPastAForeignSeq: an update naming a seq the shard has no
// item at — here another shard's item, between two runs of the shard's
// own — changes nothing, and the outcomes after it in the same call are
// still recorded: one bad seq in a batch does not lose the others.
func testUpdateItemsPastAForeignSeq(t *testing.T, s store.Store, _ Capabilities) {
	p, _ := runningJob(t, s, "tenant-a", 2, 4) // shard 0: 1 3 5 7; shard 1: 2 4 6 8
	id := p.Job.ID
	c := claim(t, s, id, 0, 4, at(time.Second), "c1")
	if !slices.Equal(seqsOf(c.Items), []int64{1, 3, 5, 7}) {
		t.Fatalf("claimed %v, want [1 3 5 7]", seqsOf(c.Items))
	}
	// Item 1 confirmed: shard 0's items now differ in state at 1 | 3 5 7.
	update(t, s, id, 0, at(2*time.Second), store.ItemUpdate{Seq: 1, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed})
	before := itemBySeq(t, s, id)
	perm := &store.ItemError{Category: store.CategoryPermanent, Code: "40003"}
	res, err := s.UpdateItems(ctxOf(t), store.UpdateItemsParams{JobID: id, Index: 0, At: at(3 * time.Second), Updates: []store.ItemUpdate{
		{Seq: 5, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed, Error: perm},
		{Seq: 2, From: store.ItemPending, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}},
		{Seq: 3, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
	}})
	after := itemBySeq(t, s, id)
	if stateOf(after[2]) != stateOf(before[2]) {
		t.Fatalf("item 2 of shard 1 changed through shard 0: %+v", after[2])
	}
	if err != nil {
		// Failing the call is allowed; then it changed nothing.
		for _, seq := range []int64{3, 5, 7} {
			if stateOf(after[seq]) != stateOf(before[seq]) {
				t.Fatalf("UpdateItems failed (%v) but item %d changed: %+v", err, seq, after[seq])
			}
		}
		return
	}
	if !slices.Equal(res.Rejected, []int64{2}) {
		t.Fatalf("UpdateItems rejected %v, want only the other shard's item 2", res.Rejected)
	}
	if res.Delta != (store.Counts{Submitted: -2, Confirmed: 1, Failed: 1}) {
		t.Fatalf("UpdateItems delta %+v, want 2 submitted → 1 confirmed, 1 failed", res.Delta)
	}
	if res.FailuresDelta[store.CategoryPermanent] != 1 {
		t.Fatalf("UpdateItems failures delta %v, want permanent +1", res.FailuresDelta)
	}
	want := map[int64]store.ItemStatus{1: store.ItemConfirmed, 3: store.ItemConfirmed, 5: store.ItemFailed, 7: store.ItemSubmitted}
	for seq, st := range want {
		if after[seq].Status != st {
			t.Fatalf("item %d is %s after the update, want %s", seq, after[seq].Status, st)
		}
	}
}
