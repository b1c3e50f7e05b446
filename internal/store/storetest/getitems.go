package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/qunfa/qunfa/internal/store"
)

// testGetItems: items read by seq are those of the shard, in seq order,
// with their recipient, status and claim, across the adapter's pages;
// seqs of another shard or of no item are left out.
func testGetItems(t *testing.T, s store.Store, _ Capabilities) {
	g, ok := s.(store.ItemGetter)
	if !ok {
		t.Fatal("the adapter does not implement store.ItemGetter")
	}
	p, _ := runningJob(t, s, "tenant-a", 2, 300)
	c := claim(t, s, p.Job.ID, 0, 10, at(1), "c1")
	if len(c.Items) != 10 {
		t.Fatalf("claimed %d items, want 10", len(c.Items))
	}
	update(t, s, p.Job.ID, 0, at(2), store.ItemUpdate{Seq: c.Items[0].Seq, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed})
	// Shard 0 holds the odd seqs 1..599; 2 is shard 1's, 601 nobody's.
	seqs := []int64{599, c.Items[3].Seq, c.Items[0].Seq, 2, 601, c.Items[3].Seq, 301}
	got, err := g.GetItems(ctxOf(t), store.GetItemsParams{JobID: p.Job.ID, Shard: 0, Seqs: seqs})
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{c.Items[0].Seq, c.Items[3].Seq, 301, 599}
	var gotSeqs []int64
	for _, it := range got {
		gotSeqs = append(gotSeqs, it.Seq)
	}
	if !slices.Equal(gotSeqs, want) {
		t.Fatalf("GetItems(%v) = seqs %v, want %v", seqs, gotSeqs, want)
	}
	for _, it := range got {
		if it.JobID != p.Job.ID || it.Shard != 0 || it.Account != "acct-0" || it.To != fmt.Sprintf("user-%d", it.Seq) {
			t.Errorf("item %+v", it)
		}
		switch it.Seq {
		case c.Items[0].Seq:
			if it.Status != store.ItemConfirmed {
				t.Errorf("item %d is %s, want confirmed", it.Seq, it.Status)
			}
		case c.Items[3].Seq:
			if it.Status != store.ItemSubmitted || it.ClaimID != "c1" {
				t.Errorf("item %d is %s under claim %q, want submitted under c1", it.Seq, it.Status, it.ClaimID)
			}
		default:
			if it.Status != store.ItemPending {
				t.Errorf("item %d is %s, want pending", it.Seq, it.Status)
			}
		}
	}
	if got, err := g.GetItems(ctxOf(t), store.GetItemsParams{JobID: p.Job.ID, Shard: 1}); err != nil || len(got) != 0 {
		t.Errorf("no seqs: %v, %v; want none", got, err)
	}
	if _, err := g.GetItems(ctxOf(t), store.GetItemsParams{JobID: "no-such-job", Shard: 0, Seqs: []int64{1}}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown job: %v, want ErrNotFound", err)
	}
	if _, err := g.GetItems(ctxOf(t), store.GetItemsParams{JobID: p.Job.ID, Shard: 0, Seqs: make([]int64, store.MaxPutItems+1)}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("%d seqs: %v, want ErrInvalidArgument", store.MaxPutItems+1, err)
	}
}
