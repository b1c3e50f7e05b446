package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestProbeGivenUpAndRetakenClosesTheBreaker: a shard that takes the
// half-open probe but finds its item not due yet gives the probe up (the
// breaker goes back to open, another shard may probe); when the item comes
// due a moment later in the same turn, the shard asks the breaker again and
// probes with it only once the breaker is half-open for it again, so the
// successful probe closes the breaker. Sending on the probe it gave up
// would send while the breaker is open, and the probe's success would
// close nothing.
func TestProbeGivenUpAndRetakenClosesTheBreaker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5, MaxWait: 300 * time.Millisecond})
	breakerAccount(p, "a", 5)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 1)}, "probe-given-up")
	if _, err := p.sender.Breakers.Open(ctx, tenant, "a", "test: the account was down"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(31 * time.Second) // the cool-down is over: the next gate probes
	// The job's one item waits out a backoff of 100 ms, within MaxWait.
	claim, err := p.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: job.Job.ID, Index: 0, Max: 1, Now: clk.Now(), ClaimID: "set-up"})
	if err != nil || len(claim.Items) != 1 {
		t.Fatalf("claim: %v (%d items)", err, len(claim.Items))
	}
	if res, err := p.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: job.Job.ID, Index: 0, At: clk.Now(), Updates: []store.ItemUpdate{{
		Seq: claim.Items[0].Seq, From: store.ItemSubmitted, ClaimID: "set-up", To: store.ItemPending,
		AttemptsDelta: -1, NextAttemptAt: clk.Now().Add(100 * time.Millisecond),
	}}}); err != nil || len(res.Rejected) != 0 {
		t.Fatalf("back to pending: %v %+v", err, res)
	}
	// One turn: it gives the probe up, waits out the backoff and probes
	// again (ending the turn instead would leave the shard to the queue's
	// redelivery, a visibility timeout later).
	p.step(ctx)
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 1 {
		t.Fatalf("after one turn: job %s %+v, want completed in that turn", v.Job.Status, v.Counts())
	}
	br, err := p.store.GetBreaker(ctx, tenant, "a")
	if err != nil || br.State != store.BreakerClosed {
		t.Fatalf("breaker after its probe succeeded: %+v %v, want closed", br, err)
	}
	if n := len(p.alerts.Of(alert.BreakerClosed)); n != 1 {
		t.Fatalf("%d BreakerClosed alerts, want 1", n)
	}
	p.checkExactlyOnce(job.Job.ID)
}
