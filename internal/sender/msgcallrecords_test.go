package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestMsgCallsRecordedForAwaitedItemsOnly: a call is recorded under its
// message id only for the items accepted and awaiting the provider's
// confirmation (a write per call that the reconciler and provider events
// need); recipients confirmed by the answer itself cost no record, and a
// recipient refused at the head of a call leaves the others of the call
// recorded.
func TestMsgCallsRecordedForAwaitedItemsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("confirmed by the answer", func(t *testing.T) {
		t.Parallel()
		p, clk := fakePipeline(t, sender.Config{ClaimBatch: 20})
		p.account("a", 1000, 1000, 0, 10)
		p.sender.MsgCalls = p.store
		job := p.submit(submit.Request{Template: "hi", Recipients: recipients([]string{"a"}, 30)}, "direct")
		if v := p.driveUntil(clk, final, job.Job.ID); v.Job.Status != store.JobCompleted {
			t.Fatalf("job %s %+v, want completed", v.Job.Status, v.Counts())
		}
		for _, it := range p.items(job.Job.ID) {
			if it.MsgID == "" {
				t.Fatalf("item %d confirmed without the provider's msgid: the test needs one", it.Seq)
			}
		}
		if calls, err := p.store.ListMsgCalls(ctx, job.Job.ID); err != nil || len(calls) != 0 {
			t.Fatalf("%d calls recorded (%v) for recipients the answers confirmed, want none", len(calls), err)
		}
	})
	t.Run("awaited after a refused recipient", func(t *testing.T) {
		t.Parallel()
		p, clk := fakePipeline(t, sender.Config{ClaimBatch: 20})
		p.account("wx-a", 1000, 1000, 0, 10)
		if err := p.mock.SetBehaviour("wx-a", mockprovider.Behaviour{InvalidToIDs: []string{"user-0"}}); err != nil {
			t.Fatal(err)
		}
		mp := &massProvider{Provider: p.sender.Provider, sent: map[string]bool{}}
		p.sender.Provider, p.sender.MsgCalls = mp, p.store
		job := p.submit(submit.Request{Template: "hi", Recipients: recipients([]string{"wx-a"}, 30)}, "mass")
		for range 10 {
			p.step(ctx)
			clk.Advance(100 * time.Millisecond)
		}
		calls, err := p.store.ListMsgCalls(ctx, job.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		seqs := 0
		for _, c := range calls {
			seqs += len(c.Seqs)
		}
		if len(calls) != 3 || seqs != 29 {
			t.Fatalf("%d calls recorded with %d items, want 3 with the 29 accepted (user-0 refused)", len(calls), seqs)
		}
	})
}
