package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

var allShardStatuses = []store.ShardStatus{
	store.ShardPending, store.ShardRunning, store.ShardPaused,
	store.ShardCompleted, store.ShardFailed, store.ShardCancelled,
}

// shardPathTo lists the transitions from pending that reach a status.
func shardPathTo(s store.ShardStatus) []store.ShardStatus {
	switch s {
	case store.ShardPending:
		return nil
	case store.ShardRunning, store.ShardPaused, store.ShardCancelled:
		return []store.ShardStatus{s}
	default:
		return []store.ShardStatus{store.ShardRunning, s}
	}
}

func transitionShard(t tb, s store.Store, p store.TransitionShardParams) store.Shard {
	t.Helper()
	sh, err := s.TransitionShard(ctxOf(t), p)
	if err != nil {
		t.Fatalf("TransitionShard(%s/%d → %s): %v", p.JobID, p.Index, p.To, err)
	}
	if sh.Status != p.To {
		t.Fatalf("TransitionShard(%s/%d → %s) returned status %s", p.JobID, p.Index, p.To, sh.Status)
	}
	return sh
}

func testTransitionShardAllPairs(t *testing.T, s store.Store, _ Capabilities) {
	n := len(allShardStatuses)
	// One job, one shard per pair.
	p, _ := NewJob("tenant-a", n*n, 1)
	createJob(t, s, p, nil)
	for i, from := range allShardStatuses {
		for j, to := range allShardStatuses {
			index := i*n + j
			t.Run(fmt.Sprintf("%s→%s", from, to), func(t *testing.T) {
				t.Parallel()
				for _, step := range shardPathTo(from) {
					transitionShard(t, s, store.TransitionShardParams{JobID: p.Job.ID, Index: index, To: step, PauseReason: store.PauseManual, At: at(time.Second)})
				}
				before := getShard(t, s, p.Job.ID, index)
				sh, err := s.TransitionShard(ctxOf(t), store.TransitionShardParams{JobID: p.Job.ID, Index: index, To: to, PauseReason: store.PauseBreaker, At: at(time.Minute)})
				after := getShard(t, s, p.Job.ID, index)
				if store.ShardTransitionAllowed(from, to) {
					if err != nil {
						t.Fatalf("allowed transition failed: %v", err)
					}
					if sh.Status != to || after.Status != to {
						t.Fatalf("status after = %s (returned %s), want %s", after.Status, sh.Status, to)
					}
					return
				}
				if !errors.Is(err, store.ErrInvalidTransition) {
					t.Fatalf("forbidden transition error = %v, want ErrInvalidTransition", err)
				}
				if !sameShard(before, after) {
					t.Fatalf("forbidden transition changed the shard:\nbefore %+v\nafter  %+v", before, after)
				}
			})
		}
	}
	t.Run("unknown", func(t *testing.T) {
		t.Parallel()
		_, err := s.TransitionShard(ctxOf(t), store.TransitionShardParams{JobID: p.Job.ID, Index: n * n, To: store.ShardRunning, At: Epoch})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("TransitionShard(unknown index) error = %v, want ErrNotFound", err)
		}
	})
}

func testTransitionShardFromAndPause(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := NewJob("tenant-a", 2, 1)
	createJob(t, s, p, nil)
	id := p.Job.ID
	transitionShard(t, s, store.TransitionShardParams{JobID: id, Index: 0, From: []store.ShardStatus{store.ShardPending}, To: store.ShardRunning, At: at(time.Second)})

	before := getShard(t, s, id, 0)
	_, err := s.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: 0, From: []store.ShardStatus{store.ShardPaused}, To: store.ShardCancelled, At: at(2 * time.Second)})
	if !errors.Is(err, store.ErrInvalidTransition) {
		t.Fatalf("TransitionShard(From paused, shard running) error = %v, want ErrInvalidTransition", err)
	}
	if after := getShard(t, s, id, 0); !sameShard(before, after) {
		t.Fatalf("refused transition changed the shard: %+v", after)
	}

	sh := transitionShard(t, s, store.TransitionShardParams{JobID: id, Index: 0, From: []store.ShardStatus{store.ShardPending, store.ShardRunning}, To: store.ShardPaused, PauseReason: store.PauseBreaker, At: at(3 * time.Second)})
	if sh.PauseReason != store.PauseBreaker || getShard(t, s, id, 0).PauseReason != store.PauseBreaker {
		t.Fatalf("paused shard PauseReason = %q, want breaker", sh.PauseReason)
	}
	if other := getShard(t, s, id, 1); other.Status != store.ShardPending || other.PauseReason != "" {
		t.Fatalf("the other shard changed: %s/%q", other.Status, other.PauseReason)
	}
	sh = transitionShard(t, s, store.TransitionShardParams{JobID: id, Index: 0, To: store.ShardRunning, At: at(4 * time.Second)})
	if sh.PauseReason != "" || getShard(t, s, id, 0).PauseReason != "" {
		t.Fatalf("resumed shard keeps PauseReason %q", sh.PauseReason)
	}
	if got := getShard(t, s, id, 0); got.Counts != (store.Counts{Pending: 1}) || got.Size != 1 || got.Account != "acct-0" {
		t.Fatalf("transitions changed other shard fields: %+v", got)
	}
}

func testTransitionShardConcurrent(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := NewJob("tenant-a", 1, 1)
	createJob(t, s, p, nil)
	transitionShard(t, s, store.TransitionShardParams{JobID: p.Job.ID, Index: 0, To: store.ShardRunning, At: Epoch})
	targets := []store.ShardStatus{store.ShardCompleted, store.ShardCancelled}
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			_, errs[g] = s.TransitionShard(ctx, store.TransitionShardParams{JobID: p.Job.ID, Index: 0, From: []store.ShardStatus{store.ShardRunning}, To: targets[g%2], At: at(time.Second)})
		})
	}
	wg.Wait()
	winner := -1
	for g, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("goroutines %d and %d both moved the shard out of running", winner, g)
			}
			winner = g
		case !errors.Is(err, store.ErrInvalidTransition) && !errors.Is(err, store.ErrConflict):
			t.Fatalf("goroutine %d: error = %v, want ErrInvalidTransition or ErrConflict", g, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no concurrent transition succeeded")
	}
	if got := getShard(t, s, p.Job.ID, 0); got.Status != targets[winner%2] {
		t.Fatalf("shard status %s, winner moved it to %s", got.Status, targets[winner%2])
	}
}

func beginTurn(t tb, s store.Store, jobID string, index int, turn int64, msg string, when time.Time) store.Shard {
	t.Helper()
	sh, err := s.BeginTurn(ctxOf(t), store.BeginTurnParams{JobID: jobID, Index: index, Turn: turn, MessageID: msg, At: when})
	if err != nil {
		t.Fatalf("BeginTurn(%s/%d, turn %d, %q): %v", jobID, index, turn, msg, err)
	}
	if sh.Turn != turn || sh.TurnMessage != msg || !sh.Dirty {
		t.Fatalf("BeginTurn(turn %d, %q) = Turn %d TurnMessage %q Dirty %v", turn, msg, sh.Turn, sh.TurnMessage, sh.Dirty)
	}
	return sh
}

func testBeginTurn(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 2, 3)
	id := p.Job.ID
	beginTurn(t, s, id, 0, 1, "m1", at(time.Second))
	if got := getShard(t, s, id, 0); got.Turn != 1 || got.TurnMessage != "m1" || !got.Dirty {
		t.Fatalf("stored shard after BeginTurn = Turn %d %q Dirty %v", got.Turn, got.TurnMessage, got.Dirty)
	}
	beginTurn(t, s, id, 0, 1, "m1", at(2*time.Second)) // redelivery

	stale := []store.BeginTurnParams{
		{Turn: 1, MessageID: "m2"}, // same turn, another message
		{Turn: 3, MessageID: "m3"}, // skips a turn
		{Turn: 0, MessageID: ""},   // an old turn
		{Turn: 0, MessageID: "m1"},
	}
	for _, bp := range stale {
		bp.JobID, bp.Index, bp.At = id, 0, at(3*time.Second)
		before := getShard(t, s, id, 0)
		if _, err := s.BeginTurn(ctx, bp); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("BeginTurn(turn %d, %q) on turn 1/m1 error = %v, want ErrConflict", bp.Turn, bp.MessageID, err)
		}
		if after := getShard(t, s, id, 0); !sameShard(before, after) {
			t.Fatalf("stale BeginTurn changed the shard: %+v", after)
		}
	}
	beginTurn(t, s, id, 0, 2, "m2", at(4*time.Second))
	if _, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: id, Index: 0, Turn: 1, MessageID: "m1", At: at(5 * time.Second)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("BeginTurn(previous turn's message) error = %v, want ErrConflict", err)
	}
	if other := getShard(t, s, id, 1); other.Turn != 0 || other.Dirty {
		t.Fatalf("other shard's turn moved: %+v", other)
	}
	beginTurn(t, s, id, 1, 1, "n1", at(5*time.Second))
	if _, err := s.BeginTurn(ctx, store.BeginTurnParams{JobID: "no-such-job", Index: 0, Turn: 1, MessageID: "x", At: Epoch}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("BeginTurn(unknown job) error = %v, want ErrNotFound", err)
	}
}

func testBeginTurnConcurrent(t *testing.T, s store.Store, _ Capabilities) {
	p, _ := runningJob(t, s, "tenant-a", 1, 3)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			_, errs[g] = s.BeginTurn(ctxOf(t), store.BeginTurnParams{JobID: p.Job.ID, Index: 0, Turn: 1, MessageID: fmt.Sprintf("m%d", g), At: at(time.Second)})
		})
	}
	wg.Wait()
	winner := -1
	for g, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("two messages (%d and %d) both began turn 1", winner, g)
			}
			winner = g
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("goroutine %d: error = %v, want ErrConflict", g, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no concurrent BeginTurn succeeded")
	}
	if got := getShard(t, s, p.Job.ID, 0); got.TurnMessage != fmt.Sprintf("m%d", winner) {
		t.Fatalf("TurnMessage %q, winner was m%d", got.TurnMessage, winner)
	}
}

func claim(t tb, s store.Store, jobID string, index, max int, now time.Time, claimID string) store.ClaimItemsResult {
	t.Helper()
	res, err := s.ClaimItems(ctxOf(t), store.ClaimItemsParams{JobID: jobID, Index: index, Max: max, Now: now, ClaimID: claimID})
	if err != nil {
		t.Fatalf("ClaimItems(%s/%d, max %d): %v", jobID, index, max, err)
	}
	return res
}

func update(t tb, s store.Store, jobID string, index int, when time.Time, ups ...store.ItemUpdate) store.UpdateItemsResult {
	t.Helper()
	res, err := s.UpdateItems(ctxOf(t), store.UpdateItemsParams{JobID: jobID, Index: index, Updates: ups, At: when})
	if err != nil {
		t.Fatalf("UpdateItems(%s/%d): %v", jobID, index, err)
	}
	return res
}

func testBeginTurnRepairsDirtyShard(t *testing.T, s store.Store, _ Capabilities) {
	p, _ := runningJob(t, s, "tenant-a", 2, 20)
	id := p.Job.ID
	beginTurn(t, s, id, 0, 1, "m1", at(time.Second))
	c := claim(t, s, id, 0, 5, at(time.Second), "c1")
	if len(c.Items) != 5 {
		t.Fatalf("claimed %d items, want 5", len(c.Items))
	}
	seq := seqsOf(c.Items)
	update(t, s, id, 0, at(2*time.Second),
		store.ItemUpdate{Seq: seq[0], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
		store.ItemUpdate{Seq: seq[1], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
		store.ItemUpdate{Seq: seq[2], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryPermanent, Code: "40003"}},
		store.ItemUpdate{Seq: seq[3], From: store.ItemSubmitted, To: store.ItemSubmitted, Error: &store.ItemError{Category: store.CategoryUncertain}},
	)
	claim(t, s, id, 0, 3, at(3*time.Second), "c2")
	// The turn dies here: no AdvanceShard.
	if got := getShard(t, s, id, 0); got.Counts != (store.Counts{Pending: 20}) || !got.Dirty {
		t.Fatalf("item operations changed the shard record (or left it clean): %+v", got)
	}

	sh := beginTurn(t, s, id, 0, 2, "m2", at(10*time.Second))
	// c1: 2 confirmed, 1 failed, 1 under review, 1 submitted; c2: 3 submitted.
	want := store.Counts{Pending: 12, Submitted: 5, Confirmed: 2, Failed: 1}
	if sh.Counts != want {
		t.Fatalf("BeginTurn after a crash: counts %+v, want %+v", sh.Counts, want)
	}
	wantF := map[string]int64{store.CategoryPermanent: 1, store.CategoryUncertain: 1}
	if !sameFailures(sh.Failures, wantF) {
		t.Fatalf("BeginTurn after a crash: failures %v, want %v", nonZero(sh.Failures), wantF)
	}
	checkShardMatchesItems(t, s, getShard(t, s, id, 0))
	if other := getShard(t, s, id, 1); other.Counts != (store.Counts{Pending: 20}) {
		t.Fatalf("other shard counts %+v", other.Counts)
	}
	// A clean end, then a new turn: still consistent, and no longer dirty
	// between turns.
	end, err := s.AdvanceShard(ctxOf(t), store.AdvanceShardParams{JobID: id, Index: 0, Turn: 2, Epoch: sh.Epoch, At: at(11 * time.Second), EndTurn: true})
	if err != nil || end.Dirty {
		t.Fatalf("AdvanceShard(EndTurn) = Dirty %v, %v", end.Dirty, err)
	}
	if got := getShard(t, s, id, 0); got.Dirty || got.Counts != want {
		t.Fatalf("after EndTurn: %+v", got)
	}
	sh = beginTurn(t, s, id, 0, 3, "m3", at(12*time.Second))
	if sh.Counts != want {
		t.Fatalf("BeginTurn on a clean shard: counts %+v, want %+v", sh.Counts, want)
	}
}

func testAdvanceShard(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 2, 10)
	id := p.Job.ID
	beginTurn(t, s, id, 0, 1, "m1", at(time.Second))
	c := claim(t, s, id, 0, 4, at(time.Second), "c1")
	last := c.Items[len(c.Items)-1].Seq
	u := update(t, s, id, 0, at(2*time.Second),
		store.ItemUpdate{Seq: c.Items[0].Seq, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryPermanent}})
	delta := c.Delta.Add(u.Delta)

	sh, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Delta: delta, FailuresDelta: u.FailuresDelta, Cursor: last + 1, SlowFactor: 0.5, At: at(3 * time.Second)})
	if err != nil {
		t.Fatalf("AdvanceShard: %v", err)
	}
	want := store.Counts{Pending: 6, Submitted: 3, Failed: 1}
	if sh.Counts != want || sh.Cursor != last+1 || sh.SlowFactor != 0.5 || !sameTime(sh.LastAdvancedAt, at(3*time.Second)) || !sh.Dirty {
		t.Fatalf("AdvanceShard = counts %+v cursor %d slow %v advanced %v dirty %v; want %+v, %d, 0.5, %v, true",
			sh.Counts, sh.Cursor, sh.SlowFactor, sh.LastAdvancedAt, sh.Dirty, want, last+1, at(3*time.Second))
	}
	if !sameFailures(sh.Failures, map[string]int64{store.CategoryPermanent: 1}) {
		t.Fatalf("failures after AdvanceShard = %v", nonZero(sh.Failures))
	}
	if got := getShard(t, s, id, 0); !sameShard(got, sh) {
		t.Fatalf("stored shard %+v, AdvanceShard returned %+v", got, sh)
	}
	checkShardMatchesItems(t, s, sh)

	// Only the current turn may advance.
	for _, turn := range []int64{0, 2} {
		before := getShard(t, s, id, 0)
		_, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: turn, Delta: store.Counts{Pending: -1, Confirmed: 1}, Cursor: 100, At: at(4 * time.Second), EndTurn: true})
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("AdvanceShard(turn %d, current 1) error = %v, want ErrConflict", turn, err)
		}
		if after := getShard(t, s, id, 0); !sameShard(before, after) {
			t.Fatalf("stale AdvanceShard changed the shard: %+v", after)
		}
	}

	// The cursor never moves back; SlowFactor 0 keeps the factor.
	sh, err = s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Cursor: 2, At: at(5 * time.Second)})
	if err != nil || sh.Cursor != last+1 || sh.SlowFactor != 0.5 || sh.Counts != want || !sameTime(sh.LastAdvancedAt, at(5*time.Second)) {
		t.Fatalf("AdvanceShard(lower cursor) = cursor %d slow %v counts %+v advanced %v, %v", sh.Cursor, sh.SlowFactor, sh.Counts, sh.LastAdvancedAt, err)
	}
	sh, err = s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Cursor: last + 1, SlowFactor: 1, At: at(6 * time.Second), EndTurn: true})
	if err != nil || sh.Dirty || sh.SlowFactor != 1 {
		t.Fatalf("AdvanceShard(EndTurn) = dirty %v slow %v, %v", sh.Dirty, sh.SlowFactor, err)
	}
	if got := getShard(t, s, id, 0); got.Dirty {
		t.Fatalf("stored shard still Dirty after EndTurn")
	}

	// A sender whose turn was taken over is fenced off.
	beginTurn(t, s, id, 0, 2, "m2", at(7*time.Second))
	if _, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, At: at(8 * time.Second)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AdvanceShard(superseded turn) error = %v, want ErrConflict", err)
	}
	if other := getShard(t, s, id, 1); other.Counts != (store.Counts{Pending: 10}) || other.Cursor != 0 {
		t.Fatalf("other shard changed: %+v", other)
	}
	if _, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: "no-such-job", Index: 0, Turn: 1, At: Epoch}); !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AdvanceShard(unknown job) error = %v, want ErrNotFound or ErrConflict", err)
	}
}

func testAddShardCounts(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 2, 10)
	id := p.Job.ID
	beginTurn(t, s, id, 0, 1, "m1", at(time.Second))
	if _, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Cursor: 7, At: at(time.Second), EndTurn: true}); err != nil {
		t.Fatalf("AdvanceShard: %v", err)
	}
	sh, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 0,
		Delta:         store.Counts{Pending: -3, Abandoned: 3},
		FailuresDelta: map[string]int64{store.CategoryCancelled: 3}})
	if err != nil {
		t.Fatalf("AddShardCounts: %v", err)
	}
	sh, err = s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 0,
		Delta:         store.Counts{Abandoned: -1, Failed: 1},
		FailuresDelta: map[string]int64{store.CategoryCancelled: -1, store.CategoryExhausted: 1}})
	if err != nil {
		t.Fatalf("AddShardCounts: %v", err)
	}
	want := store.Counts{Pending: 7, Failed: 1, Abandoned: 2}
	wantF := map[string]int64{store.CategoryCancelled: 2, store.CategoryExhausted: 1}
	if sh.Counts != want || !sameFailures(sh.Failures, wantF) || sh.Cursor != 7 || sh.Turn != 1 || sh.Dirty {
		t.Fatalf("AddShardCounts = counts %+v failures %v cursor %d turn %d dirty %v; want %+v %v 7 1 false",
			sh.Counts, nonZero(sh.Failures), sh.Cursor, sh.Turn, sh.Dirty, want, wantF)
	}
	if got := getShard(t, s, id, 0); !sameShard(got, sh) {
		t.Fatalf("stored %+v, returned %+v", got, sh)
	}
	if other := getShard(t, s, id, 1); other.Counts != (store.Counts{Pending: 10}) || len(nonZero(other.Failures)) != 0 {
		t.Fatalf("other shard changed: %+v", other)
	}
	if _, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: "no-such-job", Index: 0, Delta: store.Counts{Pending: -1, Confirmed: 1}}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AddShardCounts(unknown) error = %v, want ErrNotFound", err)
	}
}

func testRecountShard(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 2, 10)
	id := p.Job.ID
	c := claim(t, s, id, 1, 4, at(time.Second), "c1")
	seq := seqsOf(c.Items)
	update(t, s, id, 1, at(2*time.Second),
		store.ItemUpdate{Seq: seq[0], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
		store.ItemUpdate{Seq: seq[1], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryExhausted}},
		store.ItemUpdate{Seq: seq[2], From: store.ItemSubmitted, To: store.ItemSubmitted, Error: &store.ItemError{Category: store.CategoryUncertain}},
	)
	// A wrong fold, as a buggy or crashed caller leaves it.
	if _, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 1,
		Delta: store.Counts{Pending: -5, Confirmed: 5}, FailuresDelta: map[string]int64{store.CategoryRetryable: 2}}); err != nil {
		t.Fatalf("AddShardCounts: %v", err)
	}
	sh, err := s.RecountShard(ctx, id, 1)
	if err != nil {
		t.Fatalf("RecountShard: %v", err)
	}
	want := store.Counts{Pending: 6, Submitted: 2, Confirmed: 1, Failed: 1}
	wantF := map[string]int64{store.CategoryExhausted: 1, store.CategoryUncertain: 1}
	if sh.Counts != want || !sameFailures(sh.Failures, wantF) {
		t.Fatalf("RecountShard = %+v %v, want %+v %v", sh.Counts, nonZero(sh.Failures), want, wantF)
	}
	if sh.Dirty {
		t.Fatalf("RecountShard set Dirty on a shard that was clean")
	}
	checkShardMatchesItems(t, s, getShard(t, s, id, 1))

	// Dirty is left as it was.
	beginTurn(t, s, id, 0, 1, "m1", at(3*time.Second))
	sh, err = s.RecountShard(ctx, id, 0)
	if err != nil || !sh.Dirty || sh.Counts != (store.Counts{Pending: 10}) || sh.Turn != 1 {
		t.Fatalf("RecountShard(dirty shard) = %+v, %v; want still dirty, turn 1, 10 pending", sh, err)
	}
	if _, err := s.RecountShard(ctx, "no-such-job", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RecountShard(unknown) error = %v, want ErrNotFound", err)
	}
}

func testListStaleShards(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	a, _ := runningJob(t, s, "tenant-a", 6, 1)
	b, _ := runningJob(t, s, "tenant-b", 2, 1)
	advance := func(jobID string, index int, when time.Time) {
		t.Helper()
		beginTurn(t, s, jobID, index, 1, "m", when)
		if _, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: jobID, Index: index, Turn: 1, At: when, EndTurn: true}); err != nil {
			t.Fatalf("AdvanceShard: %v", err)
		}
	}
	advance(a.Job.ID, 0, at(10*time.Second))
	advance(a.Job.ID, 1, at(30*time.Second))
	advance(a.Job.ID, 2, at(10*time.Second))
	transitionShard(t, s, store.TransitionShardParams{JobID: a.Job.ID, Index: 2, To: store.ShardPaused, PauseReason: store.PauseManual, At: at(11 * time.Second)})
	// Shards paused by their breaker are watched like running ones (the
	// reconciler resumes or probes them); a breaker-paused shard that is
	// cancelled is not.
	advance(a.Job.ID, 3, at(12*time.Second))
	transitionShard(t, s, store.TransitionShardParams{JobID: a.Job.ID, Index: 3, To: store.ShardPaused, PauseReason: store.PauseBreaker, At: at(13 * time.Second)})
	advance(a.Job.ID, 4, at(25*time.Second))
	transitionShard(t, s, store.TransitionShardParams{JobID: a.Job.ID, Index: 4, To: store.ShardPaused, PauseReason: store.PauseBreaker, At: at(26 * time.Second)})
	advance(a.Job.ID, 5, at(6*time.Second))
	transitionShard(t, s, store.TransitionShardParams{JobID: a.Job.ID, Index: 5, To: store.ShardPaused, PauseReason: store.PauseBreaker, At: at(7 * time.Second)})
	transitionShard(t, s, store.TransitionShardParams{JobID: a.Job.ID, Index: 5, To: store.ShardCancelled, At: at(8 * time.Second)})
	advance(b.Job.ID, 0, at(5*time.Second))
	advance(b.Job.ID, 1, at(8*time.Second))
	transitionShard(t, s, store.TransitionShardParams{JobID: b.Job.ID, Index: 1, To: store.ShardCompleted, At: at(9 * time.Second)})

	ref := func(p store.CreateJobParams, i int) string { return fmt.Sprintf("%s/%d", p.Job.ID, i) }
	for _, tc := range []struct {
		before time.Time
		want   []string
	}{
		{at(time.Second), nil},
		{at(12 * time.Second), []string{ref(a, 0), ref(b, 0)}},
		{at(20 * time.Second), []string{ref(a, 0), ref(a, 3), ref(b, 0)}},
		{at(40 * time.Second), []string{ref(a, 0), ref(a, 1), ref(a, 3), ref(a, 4), ref(b, 0)}},
		{at(24 * time.Hour), []string{ref(a, 0), ref(a, 1), ref(a, 3), ref(a, 4), ref(b, 0)}},
	} {
		refs, err := s.ListStaleShards(ctx, store.ListStaleShardsParams{Before: tc.before, Limit: 100})
		if err != nil {
			t.Fatalf("ListStaleShards: %v", err)
		}
		var got []string
		for _, r := range refs {
			got = append(got, fmt.Sprintf("%s/%d", r.JobID, r.Index))
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(tc.want))
		if !slices.Equal(got, want) {
			t.Fatalf("ListStaleShards(before %v) = %v, want %v", tc.before.Sub(Epoch), got, want)
		}
	}
	refs, err := s.ListStaleShards(ctx, store.ListStaleShardsParams{Before: at(40 * time.Second), Limit: 2})
	if err != nil || len(refs) == 0 || len(refs) > 2 {
		t.Fatalf("ListStaleShards(limit 2) = %v, %v", refs, err)
	}
}

// testAttemptCounters: Attempts and AttemptFailures are cumulative facts
// about provider calls. AdvanceShard adds them whatever the count epoch
// (also when it recounts instead of folding the delta); recounts, turns
// and count folds never change them; a refused advance adds nothing.
func testAttemptCounters(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	p, _ := runningJob(t, s, "tenant-a", 2, 10)
	id := p.Job.ID
	check := func(op string, sh store.Shard, attempts, failures int64) {
		t.Helper()
		if sh.Attempts != attempts || sh.AttemptFailures != failures {
			t.Fatalf("%s: attempts %d/%d failed, want %d/%d", op, sh.Attempts, sh.AttemptFailures, attempts, failures)
		}
		if got := getShard(t, s, id, sh.Index); got.Attempts != attempts || got.AttemptFailures != failures {
			t.Fatalf("%s: stored attempts %d/%d failed, want %d/%d", op, got.Attempts, got.AttemptFailures, attempts, failures)
		}
	}
	check("new shard", getShard(t, s, id, 0), 0, 0)

	turn := beginTurn(t, s, id, 0, 1, "m1", at(time.Second))
	c := claim(t, s, id, 0, 4, at(time.Second), "c1")
	seq := seqsOf(c.Items)
	u := update(t, s, id, 0, at(2*time.Second),
		store.ItemUpdate{Seq: seq[0], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
		store.ItemUpdate{Seq: seq[1], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryPermanent}})
	sh, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Epoch: turn.Epoch,
		Delta: c.Delta.Add(u.Delta), FailuresDelta: u.FailuresDelta, Cursor: seq[1] + 1, At: at(2 * time.Second),
		Attempts: 2, AttemptFailures: 1})
	if err != nil {
		t.Fatalf("AdvanceShard: %v", err)
	}
	check("AdvanceShard", sh, 2, 1)

	// A refused advance (stale turn) adds nothing.
	if _, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 2, Epoch: sh.Epoch, At: at(3 * time.Second),
		Attempts: 50, AttemptFailures: 50}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AdvanceShard(stale turn) error = %v, want ErrConflict", err)
	}
	check("refused AdvanceShard", getShard(t, s, id, 0), 2, 1)

	// A recount moves the epoch and leaves the attempts alone.
	rc, err := s.RecountShard(ctx, id, 0)
	if err != nil {
		t.Fatalf("RecountShard: %v", err)
	}
	check("RecountShard", rc, 2, 1)

	// An advance of the old epoch: its count delta gives way to a recount,
	// its attempts are still added.
	u = update(t, s, id, 0, at(4*time.Second),
		store.ItemUpdate{Seq: seq[2], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed},
		store.ItemUpdate{Seq: seq[3], From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemPending, NextAttemptAt: at(time.Minute),
			Error: &store.ItemError{Category: store.CategoryRateLimited}, AttemptsDelta: -1})
	sh, err = s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Epoch: turn.Epoch,
		Delta: u.Delta, FailuresDelta: u.FailuresDelta, Cursor: seq[3] + 1, At: at(4 * time.Second),
		Attempts: 3, AttemptFailures: 2})
	if err != nil {
		t.Fatalf("AdvanceShard(stale epoch): %v", err)
	}
	if sh.Epoch <= rc.Epoch-1 {
		t.Fatalf("AdvanceShard(stale epoch) at epoch %d, recount was at %d", sh.Epoch, rc.Epoch)
	}
	checkShardMatchesItems(t, s, sh)
	check("AdvanceShard(stale epoch)", sh, 5, 3)

	// A turn that ends without EndTurn leaves the shard dirty: the next
	// BeginTurn recounts, and AddShardCounts of a stale epoch recounts.
	sh = beginTurn(t, s, id, 0, 2, "m2", at(5*time.Second))
	check("BeginTurn(dirty shard)", sh, 5, 3)
	sh, err = s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 0, Epoch: turn.Epoch,
		Delta: store.Counts{Pending: -1, Abandoned: 1}})
	if err != nil {
		t.Fatalf("AddShardCounts(stale epoch): %v", err)
	}
	check("AddShardCounts(stale epoch)", sh, 5, 3)
	sh, err = s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 2, Epoch: sh.Epoch, At: at(6 * time.Second),
		EndTurn: true, Attempts: 1})
	if err != nil {
		t.Fatalf("AdvanceShard(end turn): %v", err)
	}
	check("AdvanceShard(end turn)", sh, 6, 3)
	if other := getShard(t, s, id, 1); other.Attempts != 0 || other.AttemptFailures != 0 {
		t.Fatalf("the other shard's attempts moved: %d/%d", other.Attempts, other.AttemptFailures)
	}
	if _, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 2, Epoch: sh.Epoch, At: at(7 * time.Second),
		Attempts: -1}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("AdvanceShard(negative attempts) error = %v, want ErrInvalidArgument", err)
	}
	check("AdvanceShard(negative attempts)", getShard(t, s, id, 0), 6, 3)
}
