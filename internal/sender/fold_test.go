package sender_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// foldCountingStore counts a turn's outcome writes and shard folds; after
// crashAfter outcome writes (0: never) every write fails, as a process
// that died right after recording a batch.
type foldCountingStore struct {
	store.Store
	updates, advances atomic.Int64
	crashAfter        int64
}

func (s *foldCountingStore) dead() bool {
	return s.crashAfter > 0 && s.updates.Load() >= s.crashAfter
}

func (s *foldCountingStore) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	if s.dead() {
		return store.UpdateItemsResult{}, errCrash
	}
	s.updates.Add(1)
	return s.Store.UpdateItems(ctx, p)
}

func (s *foldCountingStore) AdvanceShard(ctx context.Context, p store.AdvanceShardParams) (store.Shard, error) {
	if s.dead() {
		return store.Shard{}, errCrash
	}
	s.advances.Add(1)
	return s.Store.AdvanceShard(ctx, p)
}

func (s *foldCountingStore) ClaimItems(ctx context.Context, p store.ClaimItemsParams) (store.ClaimItemsResult, error) {
	if s.dead() {
		return store.ClaimItemsResult{}, errCrash
	}
	return s.Store.ClaimItems(ctx, p)
}

func (s *foldCountingStore) TakeTokens(ctx context.Context, p store.TakeTokensParams) (store.TakeTokensResult, error) {
	if s.dead() {
		return store.TakeTokensResult{}, errCrash
	}
	return s.Store.TakeTokens(ctx, p)
}

// TestOutcomesFoldedEveryOtherBatch: a turn folds the outcomes it records
// into the shard at every second recording (FoldEvery's default; one call
// in flight, so each answer is recorded on its own) and at its end, not
// after every one: half the shard writes, one of DynamoDB's four writes a
// batch; the job still ends with every item confirmed once.
func TestOutcomesFoldedEveryOtherBatch(t *testing.T) {
	t.Parallel()
	p, _ := fakePipeline(t, sender.Config{ClaimBatch: 10, Concurrency: 1})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 60)}, "fold")
	cs := &foldCountingStore{Store: p.store}
	s2 := *p.sender
	s2.Store = cs
	res, err := s2.HandleTurn(context.Background(), p.nextTurn(time.Minute))
	if err != nil || res.Disposition != sender.Done {
		t.Fatalf("turn = %+v, %v; want done", res, err)
	}
	batches, folds := cs.updates.Load(), cs.advances.Load()
	t.Logf("%d recordings, %d shard folds", batches, folds)
	if batches < 6 || folds > batches/2+1 {
		t.Errorf("%d shard folds for %d recordings, want one every second recording and one at the end", folds, batches)
	}
	v, err := p.store.GetJob(context.Background(), job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Job.Status != store.JobCompleted || v.Counts() != (store.Counts{Confirmed: 60}) {
		t.Fatalf("job %s %+v, want completed with 60 confirmed", v.Job.Status, v.Counts())
	}
	p.checkExactlyOnce(job.Job.ID)
}

// TestTurnDyingBetweenFoldsLosesNothing: a turn dies right after its
// third recording of outcomes, which it had not folded into the shard
// yet; the next turn recounts the shard from the items (the dead turn
// left it dirty) and finishes the job with counts that match the items
// and every recipient sent to once.
func TestTurnDyingBetweenFoldsLosesNothing(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 10, Concurrency: 1})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 60)}, "dies")
	cs := &foldCountingStore{Store: p.store, crashAfter: 3}
	s2 := *p.sender
	s2.Store = cs
	if _, err := s2.HandleTurn(context.Background(), p.nextTurn(time.Second)); !errors.Is(err, errCrash) {
		t.Fatalf("the dying turn returned %v, want the injected crash", err)
	}
	if n := cs.advances.Load(); n != 1 {
		t.Fatalf("%d folds before the crash, want 1 (recordings 1 and 2; the third not yet)", n)
	}
	sh, err := p.store.GetShard(context.Background(), job.Job.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !sh.Dirty || sh.Counts.Confirmed != 2 {
		t.Fatalf("shard after the crash: dirty %v, counts %+v; want dirty with the 2 folded confirmations", sh.Dirty, sh.Counts)
	}
	clk.Advance(2 * time.Second)
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Counts() != (store.Counts{Confirmed: 60}) {
		t.Fatalf("job %s %+v, want completed with 60 confirmed", v.Job.Status, v.Counts())
	}
	p.checkExactlyOnce(job.Job.ID)
}
