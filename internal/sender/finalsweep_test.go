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
	rep, err := p.reconciler.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Swept != 1 {
		t.Errorf("the pass reports %d shards swept, want 1", rep.Swept)
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
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4, FoldEvery: 1})
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
	// Within the grace period the change may still be under way and
	// publish its outcomes itself: a pass publishes nothing again.
	outcomes := &alerttest.Recorder{}
	p.reconciler.Outcomes = outcomes
	clk.Advance(store.OutcomesOutsideGrace / 2)
	if _, err := p.reconciler.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := outcomeSeqs(outcomes.Of(alert.ItemOutcomes)); len(got) != 0 {
		t.Fatalf("a pass within the grace period published %v again: an outside change under way publishes them itself", got)
	}
	clk.Advance(store.OutcomesOutsideGrace / 2)
	sweepPublishesAgain(t, p, job.Job.ID)
}

// markBeforeRecount starts an outside change (marks the shard) right
// before the turn's first recount; the change never finishes.
type markBeforeRecount struct {
	store.Store
	t      *testing.T
	marked bool
}

func (s *markBeforeRecount) RecountShard(ctx context.Context, jobID string, index int) (store.Shard, error) {
	if !s.marked {
		s.marked = true
		if _, err := s.Store.MarkShardDirty(ctx, jobID, index); err != nil {
			s.t.Errorf("mark shard: %v", err)
		}
	}
	return s.Store.RecountShard(ctx, jobID, index)
}

// TestAReplayDoesNotCoverAnOutsideChangeBeforeTheTurnsRecount: a turn
// replays a dead turn's outcomes, then recounts its shard (its counts
// said nothing was pending) after an outside change marked it, and
// finishes the shard. The recount's epoch includes that mark; the replay
// came before the change and cannot have published its outcomes, so the
// finished shard is left for the sweep, which publishes them.
func TestAReplayDoesNotCoverAnOutsideChangeBeforeTheTurnsRecount(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	p.sender.Outcomes = &alerttest.Recorder{}
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 4)}, "replay-recount")
	racing := &markBeforeRecount{Store: p.store, t: t}
	deadTurnThenReplay(t, p, clk, racing)
	if !racing.marked {
		t.Fatal("the turn never recounted its shard")
	}
	sweepPublishesAgain(t, p, job.Job.ID)
}

// TestSweepPublishesAlthoughItemsAwaitReview: a cancelled job's last turn
// cannot publish its outcomes, and one item of the shard is still
// submitted (its answer was lost; it waits for a look-up or an
// operator). The sweep publishes the final items' outcomes and clears
// the mark in one pass, without waiting for that item: otherwise the
// shard would be listed again at every pass, taking a place in the
// sweep's listing for as long as the item waits.
func TestSweepPublishesAlthoughItemsAwaitReview(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4, MaxWait: 300 * time.Millisecond})
	p.account("a", 0.001, 4, 0, 1) // two tokens, then none for half an hour
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 8)}, "sweep-review")
	ctx := context.Background()
	dead := *p.sender
	dead.Outcomes = deadPublisher{}
	if _, err := dead.HandleTurn(ctx, p.nextTurn(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// One item taken outside any turn and left submitted, once the turn
	// handed back is due again.
	clk.Advance(16 * time.Minute)
	sh, err := p.store.GetShard(ctx, job.Job.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: job.Job.ID, Index: 0, Max: 1, Now: clk.Now(), ClaimID: "lost-answer"})
	if err != nil || len(c.Items) != 1 {
		t.Fatalf("claim: %v (%d items)", err, len(c.Items))
	}
	if _, err := p.store.AddShardCounts(ctx, store.AddShardCountsParams{JobID: job.Job.ID, Index: 0, Epoch: sh.Epoch, Delta: c.Delta}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.store.TransitionJob(ctx, store.TransitionJobParams{JobID: job.Job.ID, To: store.JobCancelled, At: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := dead.HandleTurn(ctx, p.nextTurn(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if sh, err = p.store.GetShard(ctx, job.Job.ID, 0); err != nil {
		t.Fatal(err)
	}
	if sh.Counts.Submitted != 1 || sh.Status != store.ShardCancelled {
		t.Fatalf("shard %s counts %+v, want cancelled with one item submitted", sh.Status, sh.Counts)
	}
	sweepPublishesAgain(t, p, job.Job.ID)
	listed, err := p.store.ListDirtyShards(ctx, store.ListDirtyShardsParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(listed, store.ShardRef{JobID: job.Job.ID, Index: 0}) {
		t.Fatal("the shard is still listed for the sweep after its outcomes went out")
	}
}

// TestAReplayAndTheTurnsOwnRecountClearTheMarks: the same turn without
// the outside change: its replay and its own recount (the epoch moved by
// one) leave nothing to publish again, so the shard it finishes is clean
// and unmarked and the sweep has nothing to do there.
func TestAReplayAndTheTurnsOwnRecountClearTheMarks(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	p.sender.Outcomes = &alerttest.Recorder{}
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 4)}, "replay-own-recount")
	recounts := &countRecounts{Store: p.store}
	deadTurnThenReplay(t, p, clk, recounts)
	if recounts.n == 0 {
		t.Fatal("the turn never recounted its shard")
	}
	sh, err := p.store.GetShard(context.Background(), job.Job.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !store.ShardFinal(sh.Status) || store.NeedsSweep(sh) {
		t.Fatalf("shard %+v after the replaying turn, want it finished, clean and unmarked (its outcomes went out once)", sh)
	}
}

// countRecounts counts the turn's RecountShard calls.
type countRecounts struct {
	store.Store
	n int
}

func (s *countRecounts) RecountShard(ctx context.Context, jobID string, index int) (store.Shard, error) {
	s.n++
	return s.Store.RecountShard(ctx, jobID, index)
}
