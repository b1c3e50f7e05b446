package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// The subtests below check count epochs (see the store package doc): a
// delta is folded only while the epoch its caller read is still the
// shard's; once a recount has moved the epoch the delta may already be
// counted, so the store recounts instead of folding it.

// checkRecounted fails unless sh is stored as returned, equals a recount of
// its items and is in a later epoch than before.
func checkRecounted(t tb, s store.Store, op string, sh store.Shard, before int64) {
	t.Helper()
	if sh.Epoch <= before {
		t.Fatalf("%s: Epoch %d, want more than %d (a recount starts a new epoch)", op, sh.Epoch, before)
	}
	if got := getShard(t, s, sh.JobID, sh.Index); !sameShard(got, sh) {
		t.Fatalf("%s: stored shard %+v, returned %+v", op, got, sh)
	}
	checkShardMatchesItems(t, s, sh)
}

// testEpochStaleAdvance: a turn's delta read at an epoch that a recount has
// since replaced is not folded on top of the recount.
func testEpochStaleAdvance(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 2, 10)
	id := p.Job.ID
	turn := beginTurn(t, s, id, 0, 1, "m1", at(time.Second))
	c := claim(t, s, id, 0, 4, at(time.Second), "c1")
	if len(c.Items) != 4 {
		t.Fatalf("claimed %d items, want 4", len(c.Items))
	}
	seq := seqsOf(c.Items)
	u := update(t, s, id, 0, at(2*time.Second),
		store.ItemUpdate{Seq: seq[0], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
		store.ItemUpdate{Seq: seq[1], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryPermanent}})

	// The reconciler recounts while the turn runs: the recount already
	// holds the turn's changes.
	rc, err := s.RecountShard(ctx, id, 0)
	if err != nil {
		t.Fatalf("RecountShard: %v", err)
	}
	want := store.Counts{Pending: 6, Submitted: 2, Confirmed: 1, Failed: 1}
	if rc.Counts != want {
		t.Fatalf("RecountShard = %+v, want %+v", rc.Counts, want)
	}
	checkRecounted(t, s, "RecountShard", rc, turn.Epoch)

	// A stale turn number still fences the shard off, whatever the epoch.
	before := getShard(t, s, id, 0)
	if _, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 2, Epoch: turn.Epoch,
		Delta: c.Delta, Cursor: 100, At: at(3 * time.Second), EndTurn: true}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AdvanceShard(turn 2 of 1, stale epoch) error = %v, want ErrConflict", err)
	}
	if after := getShard(t, s, id, 0); !sameShard(before, after) {
		t.Fatalf("stale AdvanceShard changed the shard:\nbefore %+v\nafter  %+v", before, after)
	}

	// The turn folds its delta relative to the epoch it began in.
	last := seq[len(seq)-1]
	sh, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Epoch: turn.Epoch,
		Delta: c.Delta.Add(u.Delta), FailuresDelta: u.FailuresDelta, Cursor: last + 1, SlowFactor: 0.5, At: at(4 * time.Second)})
	if err != nil {
		t.Fatalf("AdvanceShard(stale epoch): %v", err)
	}
	if sh.Counts != want || !sameFailures(sh.Failures, map[string]int64{store.CategoryPermanent: 1}) {
		t.Fatalf("AdvanceShard(stale epoch) = counts %+v failures %v; want %+v and 1 permanent (the delta was counted twice?)",
			sh.Counts, nonZero(sh.Failures), want)
	}
	// The rest of the advance applies.
	if sh.Cursor != last+1 || sh.SlowFactor != 0.5 || !sameTime(sh.LastAdvancedAt, at(4*time.Second)) || !sh.Dirty || sh.Turn != 1 {
		t.Fatalf("AdvanceShard(stale epoch) = cursor %d slow %v advanced %v dirty %v turn %d; want %d, 0.5, %v, true, 1",
			sh.Cursor, sh.SlowFactor, sh.LastAdvancedAt, sh.Dirty, sh.Turn, last+1, at(4*time.Second))
	}
	checkRecounted(t, s, "AdvanceShard(stale epoch)", sh, rc.Epoch)

	// Adopting the returned epoch, the turn folds its next delta as usual.
	c2 := claim(t, s, id, 0, 3, at(5*time.Second), "c2")
	next, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Epoch: sh.Epoch,
		Delta: c2.Delta, Cursor: c2.Items[len(c2.Items)-1].Seq + 1, At: at(6 * time.Second), EndTurn: true})
	if err != nil {
		t.Fatalf("AdvanceShard(current epoch): %v", err)
	}
	if next.Epoch != sh.Epoch || next.Dirty || next.Counts != want.Add(c2.Delta) {
		t.Fatalf("AdvanceShard(current epoch) = epoch %d dirty %v counts %+v; want epoch %d, clean, %+v",
			next.Epoch, next.Dirty, next.Counts, sh.Epoch, want.Add(c2.Delta))
	}
	checkShardMatchesItems(t, s, next)
	if other := getShard(t, s, id, 1); other.Counts != (store.Counts{Pending: 10}) || other.Epoch != 0 {
		t.Fatalf("other shard changed: %+v", other)
	}
}

// testEpochRedeliveredTurn interleaves two runs of the same turn (the
// queue redelivered its message while the first run still works): each
// claims, records outcomes and advances with the epoch its BeginTurn
// returned, and the redelivery's BeginTurn recounts the dirty shard in
// between. The counts must end equal to the items.
func testEpochRedeliveredTurn(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 1, 12)
	id := p.Job.ID
	first := beginTurn(t, s, id, 0, 1, "m1", at(time.Second))
	ca := claim(t, s, id, 0, 3, at(time.Second), "a1")
	ua := update(t, s, id, 0, at(2*time.Second),
		store.ItemUpdate{Seq: ca.Items[0].Seq, From: store.ItemSubmitted, ClaimID: "a1", To: store.ItemConfirmed},
		store.ItemUpdate{Seq: ca.Items[1].Seq, From: store.ItemSubmitted, ClaimID: "a1", To: store.ItemConfirmed})
	aDelta, aFailures := ca.Delta.Add(ua.Delta), ua.FailuresDelta

	// The redelivery begins the same turn: the shard is dirty, so it is
	// recounted, and already holds the first run's changes.
	second := beginTurn(t, s, id, 0, 1, "m1", at(3*time.Second))
	checkRecounted(t, s, "BeginTurn(redelivery)", second, first.Epoch)
	cb := claim(t, s, id, 0, 2, at(3*time.Second), "b1")
	ub := update(t, s, id, 0, at(4*time.Second),
		store.ItemUpdate{Seq: cb.Items[0].Seq, From: store.ItemSubmitted, ClaimID: "b1", To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryPermanent}})
	bDelta, bFailures := cb.Delta.Add(ub.Delta), ub.FailuresDelta

	// The first run advances with its old epoch: recounted, not folded.
	sa, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Epoch: first.Epoch,
		Delta: aDelta, FailuresDelta: aFailures, Cursor: ca.Items[2].Seq + 1, At: at(5 * time.Second)})
	if err != nil {
		t.Fatalf("AdvanceShard(first run): %v", err)
	}
	checkRecounted(t, s, "AdvanceShard(first run, stale epoch)", sa, second.Epoch)

	// More work by the first run, folded at the epoch it adopted.
	ca2 := claim(t, s, id, 0, 2, at(6*time.Second), "a2")
	ua2 := update(t, s, id, 0, at(6*time.Second),
		store.ItemUpdate{Seq: ca2.Items[0].Seq, From: store.ItemSubmitted, ClaimID: "a2", To: store.ItemConfirmed})

	// The redelivery advances with the epoch its BeginTurn returned, which
	// the first run's recount has replaced.
	sb, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Epoch: second.Epoch,
		Delta: bDelta, FailuresDelta: bFailures, Cursor: cb.Items[1].Seq + 1, At: at(7 * time.Second)})
	if err != nil {
		t.Fatalf("AdvanceShard(redelivery): %v", err)
	}
	checkRecounted(t, s, "AdvanceShard(redelivery, stale epoch)", sb, sa.Epoch)

	end, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Epoch: sa.Epoch,
		Delta: ca2.Delta.Add(ua2.Delta), FailuresDelta: ua2.FailuresDelta, Cursor: ca2.Items[1].Seq + 1, At: at(8 * time.Second), EndTurn: true})
	if err != nil {
		t.Fatalf("AdvanceShard(first run, end): %v", err)
	}
	checkRecounted(t, s, "AdvanceShard(first run, end, stale epoch)", end, sb.Epoch)
	want := store.Counts{Pending: 5, Submitted: 3, Confirmed: 3, Failed: 1}
	if end.Counts != want || end.Dirty {
		t.Fatalf("after both runs: counts %+v dirty %v, want %+v, clean", end.Counts, end.Dirty, want)
	}
}

// testEpochRedeliveredTurnConcurrent runs several copies of one turn at
// once, each beginning (a recount of the dirty shard), claiming,
// confirming and advancing with its own epoch.
func testEpochRedeliveredTurnConcurrent(t *testing.T, s store.Store, caps Capabilities) {
	const runs, rounds = 4, 3
	p, _ := runningJob(t, s, "tenant-a", 1, runs*rounds*2+5)
	id := p.Job.ID
	beginTurn(t, s, id, 0, 1, "m1", at(time.Second))
	errs := make([]error, runs)
	var wg sync.WaitGroup
	for g := range runs {
		wg.Go(func() {
			errs[g] = func() error {
				ctx := ctxOf(t)
				for r := range rounds {
					sh, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: id, Index: 0, Turn: 1, MessageID: "m1", At: at(2 * time.Second)})
					if err != nil {
						return fmt.Errorf("BeginTurn: %w", err)
					}
					claimID := fmt.Sprintf("g%d-r%d", g, r)
					c, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: id, Index: 0, Max: 2, Now: at(2 * time.Second), ClaimID: claimID})
					if err != nil {
						return fmt.Errorf("ClaimItems: %w", err)
					}
					delta := c.Delta
					var failures map[string]int64
					if len(c.Items) > 0 {
						u, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: id, Index: 0, At: at(3 * time.Second), Updates: []store.ItemUpdate{
							{Seq: c.Items[0].Seq, From: store.ItemSubmitted, ClaimID: claimID, To: store.ItemConfirmed}}})
						if err != nil {
							return fmt.Errorf("UpdateItems: %w", err)
						}
						delta, failures = delta.Add(u.Delta), u.FailuresDelta
					}
					if _, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Epoch: sh.Epoch,
						Delta: delta, FailuresDelta: failures, At: at(4 * time.Second)}); err != nil {
						return fmt.Errorf("AdvanceShard: %w", err)
					}
				}
				return nil
			}()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	checkShardMatchesItems(t, s, getShard(t, s, id, 0))
}

// testEpochStaleAddShardCounts: an operator's delta read at an epoch that a
// recount has since replaced is not folded on top of the recount.
func testEpochStaleAddShardCounts(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 1, 10)
	id := p.Job.ID
	read := getShard(t, s, id, 0)
	u := update(t, s, id, 0, at(time.Second),
		store.ItemUpdate{Seq: 1, From: store.ItemPending, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}},
		store.ItemUpdate{Seq: 2, From: store.ItemPending, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}})
	rc, err := s.RecountShard(ctx, id, 0)
	if err != nil {
		t.Fatalf("RecountShard: %v", err)
	}
	checkRecounted(t, s, "RecountShard", rc, read.Epoch)

	sh, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 0, Epoch: read.Epoch, Delta: u.Delta, FailuresDelta: u.FailuresDelta})
	if err != nil {
		t.Fatalf("AddShardCounts(stale epoch): %v", err)
	}
	want := store.Counts{Pending: 8, Abandoned: 2}
	if sh.Counts != want || !sameFailures(sh.Failures, map[string]int64{store.CategoryCancelled: 2}) {
		t.Fatalf("AddShardCounts(stale epoch) = counts %+v failures %v; want %+v and 2 cancelled (the delta was counted twice?)",
			sh.Counts, nonZero(sh.Failures), want)
	}
	checkRecounted(t, s, "AddShardCounts(stale epoch)", sh, rc.Epoch)

	// At the current epoch the delta is folded and the epoch stays.
	u = update(t, s, id, 0, at(2*time.Second),
		store.ItemUpdate{Seq: 3, From: store.ItemPending, To: store.ItemAbandoned, Error: &store.ItemError{Category: store.CategoryCancelled}})
	next, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 0, Epoch: sh.Epoch, Delta: u.Delta, FailuresDelta: u.FailuresDelta})
	if err != nil {
		t.Fatalf("AddShardCounts(current epoch): %v", err)
	}
	if next.Epoch != sh.Epoch || next.Counts != want.Add(u.Delta) {
		t.Fatalf("AddShardCounts(current epoch) = epoch %d counts %+v; want %d, %+v", next.Epoch, next.Counts, sh.Epoch, want.Add(u.Delta))
	}
	checkShardMatchesItems(t, s, next)
	if _, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: "no-such-job", Index: 0, Epoch: 3}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AddShardCounts(unknown job, stale epoch) error = %v, want ErrNotFound", err)
	}
	if _, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 5, Epoch: 3}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AddShardCounts(unknown shard, stale epoch) error = %v, want ErrNotFound", err)
	}
}

// testEpochReported: every read and write of a shard returns its epoch,
// CreateJob keeps the epochs given, and every recount increases it.
func testEpochReported(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, items := NewJob("tenant-a", 2, 6)
	p.Shards[1].Epoch = 7
	createJob(t, s, p, items)
	id := p.Job.ID
	if _, err := s.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobRunning, At: Epoch}); err != nil {
		t.Fatalf("TransitionJob: %v", err)
	}
	v := getJob(t, s, id)
	if len(v.Shards) != 2 || v.Shards[0].Epoch != 0 || v.Shards[1].Epoch != 7 {
		t.Fatalf("GetJob after CreateJob: shard epochs %v, want [0 7]", shardEpochs(v.Shards))
	}
	if sh := getShard(t, s, id, 1); sh.Epoch != 7 {
		t.Fatalf("GetShard after CreateJob: Epoch %d, want 7", sh.Epoch)
	}

	epoch := int64(0)
	// next checks that op returned sh in a later epoch (recount) or the
	// same one, and that GetShard and GetJob report it.
	next := func(op string, sh store.Shard, recount bool) {
		t.Helper()
		switch {
		case recount && sh.Epoch <= epoch:
			t.Fatalf("%s recounted but returned Epoch %d, was %d", op, sh.Epoch, epoch)
		case !recount && sh.Epoch != epoch:
			t.Fatalf("%s returned Epoch %d, want %d (no recount)", op, sh.Epoch, epoch)
		}
		epoch = sh.Epoch
		if got := getShard(t, s, id, 0); got.Epoch != epoch {
			t.Fatalf("after %s: GetShard Epoch %d, returned %d", op, got.Epoch, epoch)
		}
		if got := getJob(t, s, id).Shards[0]; got.Epoch != epoch {
			t.Fatalf("after %s: GetJob shard Epoch %d, returned %d", op, got.Epoch, epoch)
		}
	}
	sh := beginTurn(t, s, id, 0, 1, "m1", at(time.Second)) // clean: no recount
	next("BeginTurn(clean shard)", sh, false)
	c := claim(t, s, id, 0, 2, at(time.Second), "c1")
	sh, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Epoch: epoch, Delta: c.Delta, At: at(2 * time.Second)})
	if err != nil {
		t.Fatalf("AdvanceShard: %v", err)
	}
	next("AdvanceShard(current epoch)", sh, false)
	sh, err = s.RecountShard(ctx, id, 0)
	if err != nil {
		t.Fatalf("RecountShard: %v", err)
	}
	next("RecountShard", sh, true)
	sh, err = s.RecountShard(ctx, id, 0)
	if err != nil {
		t.Fatalf("RecountShard: %v", err)
	}
	next("RecountShard again", sh, true)
	sh = beginTurn(t, s, id, 0, 1, "m1", at(3*time.Second)) // redelivery on a dirty shard
	next("BeginTurn(dirty shard)", sh, true)
	sh, err = s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Epoch: epoch - 1, At: at(4 * time.Second), EndTurn: true})
	if err != nil {
		t.Fatalf("AdvanceShard(stale epoch): %v", err)
	}
	next("AdvanceShard(stale epoch)", sh, true)
	sh = beginTurn(t, s, id, 0, 2, "m2", at(5*time.Second)) // clean again
	next("BeginTurn(clean shard)", sh, false)
	sh, err = s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 0, Epoch: epoch})
	if err != nil {
		t.Fatalf("AddShardCounts: %v", err)
	}
	next("AddShardCounts(current epoch)", sh, false)
	sh, err = s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 0, Epoch: epoch + 1})
	if err != nil {
		t.Fatalf("AddShardCounts(other epoch): %v", err)
	}
	next("AddShardCounts(other epoch)", sh, true)
	sh = transitionShard(t, s, store.TransitionShardParams{JobID: id, Index: 0, To: store.ShardPaused, PauseReason: store.PauseManual, At: at(6 * time.Second)})
	next("TransitionShard", sh, false)
	checkShardMatchesItems(t, s, sh)
	if other := getShard(t, s, id, 1); other.Epoch != 7 {
		t.Fatalf("other shard's epoch moved to %d", other.Epoch)
	}
}

func shardEpochs(shards []store.Shard) []int64 {
	out := make([]int64, len(shards))
	for i, sh := range shards {
		out[i] = sh.Epoch
	}
	return out
}
