package sender_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// The last turn of a shard finishes it, and no turn comes to a final
// shard: outcomes that turn could not publish, or that an outside change
// racing it may not have published, are the reconciler's sweep's to
// publish again (ListDirtyShards lists such shards).

// sweepPublishesAgain runs a reconciler pass with a working bus and
// checks that every final outcome of the job's shard 0 is published and
// that the shard is left clean and unmarked.
func sweepPublishesAgain(t *testing.T, p *pipeline, jobID string) {
	t.Helper()
	ctx := context.Background()
	sh, err := p.store.GetShard(ctx, jobID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !store.ShardFinal(sh.Status) {
		t.Fatalf("shard %s, want it finished by its last turn", sh.Status)
	}
	listed, err := p.store.ListDirtyShards(ctx, store.ListDirtyShardsParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(listed, store.ShardRef{JobID: jobID, Index: 0}) {
		t.Fatalf("finished shard %+v not listed for the sweep (%v): its unpublished outcomes would never go out", sh, listed)
	}
	outcomes := &alerttest.Recorder{}
	p.reconciler.Outcomes = outcomes
	if _, err := p.reconciler.Run(ctx); err != nil {
		t.Fatal(err)
	}
	got := outcomeSeqs(outcomes.Of(alert.ItemOutcomes))
	for _, seq := range finalSeqs(p, jobID) {
		if !slices.Contains(got, seq) {
			t.Errorf("outcome of seq %d not published by the sweep (published %v)", seq, sortedSeqs(got))
		}
	}
	if sh, err = p.store.GetShard(ctx, jobID, 0); err != nil {
		t.Fatal(err)
	}
	if store.NeedsSweep(sh) {
		t.Errorf("after the sweep the shard is %+v, want it clean and unmarked", sh)
	}
}

// TestOutcomesTheLastTurnCouldNotPublishAreSwept: the bus refuses the
// outcomes of a job's last turn, which finishes the job; the sweep
// publishes them.
func TestOutcomesTheLastTurnCouldNotPublishAreSwept(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	p.sender.Outcomes = deadPublisher{}
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 10)}, "last-unpublished")
	if v := p.driveUntil(clk, final, job.Job.ID); v.Job.Status != store.JobCompleted {
		t.Fatalf("job %s, want completed", v.Job.Status)
	}
	sweepPublishesAgain(t, p, job.Job.ID)
}

// TestOutcomesOfAnOutsideChangeRacingTheLastTurnAreSwept: an outside
// change marks the shard during its last turn and dies unfinished; the
// turn finishes the shard, and the sweep publishes the outcomes again.
func TestOutcomesOfAnOutsideChangeRacingTheLastTurnAreSwept(t *testing.T) {
	t.Parallel()
	p, _ := fakePipeline(t, sender.Config{ClaimBatch: 4, FoldEvery: 1})
	p.sender.Outcomes = &alerttest.Recorder{}
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 10)}, "racing-last")
	racing := *p.sender
	change := &outsideChangeDies{Store: p.store, t: t}
	racing.Store = change
	res, err := racing.HandleTurn(context.Background(), p.nextTurn(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !change.marked || res.Reason != "shard completed" {
		t.Fatalf("turn %+v (outside change begun: %v), want it to finish the shard during the change", res, change.marked)
	}
	sweepPublishesAgain(t, p, job.Job.ID)
}
