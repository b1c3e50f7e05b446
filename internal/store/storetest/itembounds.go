package storetest

import (
	"fmt"
	"testing"

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
