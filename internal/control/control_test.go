package control_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

type fixture struct {
	store *sqlitestore.Store
	ctl   *control.Controller
	clk   *clock.Fake
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := clock.NewFake(storetest.Epoch)
	q, err := sqlitequeue.Open(ctx, filepath.Join(dir, "queue.db"), sqlitequeue.Options{Name: "work", DeadLetter: "dlq", MaxReceiveCount: 10, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return fixture{store: st, clk: clk, ctl: &control.Controller{Store: st, Queue: q, Clock: clk}}
}

// runningJob creates a running job of one shard with n items and claims
// them all (submitted, as a sender turn leaves them before the answers).
func (f fixture) runningJob(t *testing.T, n int) (string, []store.Item) {
	t.Helper()
	ctx := context.Background()
	p, items := storetest.NewJob("t1", 1, n)
	if _, err := f.store.CreateJob(ctx, p); err != nil {
		t.Fatal(err)
	}
	f.putItems(t, p.Job.ID, items)
	if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: p.Job.ID, To: store.JobRunning, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: p.Job.ID, Index: 0, To: store.ShardRunning, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	sh, err := f.store.GetShard(ctx, p.Job.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: p.Job.ID, Index: 0, Max: n, Now: f.clk.Now(), ClaimID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.FoldOutsideTurn(ctx, f.store, sh, res.Delta, nil); err != nil {
		t.Fatal(err)
	}
	return p.Job.ID, res.Items
}

// mark records an error on submitted items, as the sender (answer lost)
// or the reconciler (review) does.
func (f fixture) mark(t *testing.T, jobID string, e store.ItemError, seqs ...int64) {
	t.Helper()
	ctx := context.Background()
	sh, err := f.store.GetShard(ctx, jobID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ups []store.ItemUpdate
	for _, s := range seqs {
		e := e
		ups = append(ups, store.ItemUpdate{Seq: s, From: store.ItemSubmitted, To: store.ItemSubmitted, Error: &e})
	}
	res, err := f.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: 0, Updates: ups, At: f.clk.Now()})
	if err != nil || len(res.Rejected) > 0 {
		t.Fatalf("mark: %v %v", err, res.Rejected)
	}
	if _, err := store.FoldOutsideTurn(ctx, f.store, sh, res.Delta, res.FailuresDelta); err != nil {
		t.Fatal(err)
	}
}

// TestResendOnlyAfterLookUp: an item whose answer was lost is uncertain at
// once, but it may have been delivered: an operator may resend it only
// after the reconciler's status look-up said the provider has no record of
// it (or the provider has no look-up and the item waited past the settle
// delay) — the reconciler marks such items under review. Before that,
// "resend" is refused and changes nothing.
func TestResendOnlyAfterLookUp(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	jobID, items := f.runningJob(t, 2)
	lost, reviewed := items[0].Seq, items[1].Seq
	f.mark(t, jobID, store.ItemError{Category: store.CategoryUncertain, Message: "response timeout"}, lost)
	f.mark(t, jobID, store.ItemError{Category: store.CategoryUncertain, Code: store.CodeReview, Message: "looked up: unknown"}, reviewed)
	f.clk.Advance(time.Second)

	if _, err := f.ctl.Resolve(ctx, jobID, lost, control.Resend); !errors.Is(err, control.ErrNotUnderReview) {
		t.Fatalf("resend of an item not yet looked up: err = %v, want ErrNotUnderReview", err)
	}
	page, err := f.store.ListItems(ctx, store.ListItemsParams{JobID: jobID})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range page.Items {
		if it.Status != store.ItemSubmitted {
			t.Fatalf("item %d is %s after a refused resend, want still submitted", it.Seq, it.Status)
		}
		if got, want := store.UnderReview(it), it.Seq == reviewed; got != want {
			t.Fatalf("UnderReview(item %d) = %v, want %v", it.Seq, got, want)
		}
	}
	it, err := f.ctl.Resolve(ctx, jobID, reviewed, control.Resend)
	if err != nil || it.Status != store.ItemPending {
		t.Fatalf("resend of an item under review: %+v %v", it, err)
	}
	// "delivered" (a missed message at worst, never a duplicate) stays
	// allowed for any uncertain item.
	if it, err := f.ctl.Resolve(ctx, jobID, lost, control.Delivered); err != nil || it.Status != store.ItemConfirmed {
		t.Fatalf("delivered: %+v %v", it, err)
	}
}

// crashBeforeFold is a store that dies (errors) when an outside-turn change
// folds its counts, after the change wrote its items.
type crashBeforeFold struct{ store.Store }

var errCrash = errors.New("process died")

func (crashBeforeFold) AddShardCounts(context.Context, store.AddShardCountsParams) (store.Shard, error) {
	return store.Shard{}, errCrash
}

func (crashBeforeFold) RecountShard(context.Context, string, int) (store.Shard, error) {
	return store.Shard{}, errCrash
}

// TestCrashBeforeFoldHeals: an operator change that dies between writing
// its items and folding their counts leaves the shard dirty, so the next
// turn recounts it instead of running on wrong counts for good.
func TestCrashBeforeFoldHeals(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	jobID, items := f.runningJob(t, 3)
	f.mark(t, jobID, store.ItemError{Category: store.CategoryUncertain, Message: "response timeout"}, items[0].Seq)
	crashing := &control.Controller{Store: crashBeforeFold{f.store}, Queue: f.ctl.Queue, Clock: f.clk}
	if _, err := crashing.Resolve(ctx, jobID, items[0].Seq, control.Delivered); !errors.Is(err, errCrash) {
		t.Fatalf("resolve: err = %v, want the crash", err)
	}
	sh, err := f.store.BeginTurn(ctx, store.BeginTurnParams{JobID: jobID, Index: 0, Turn: 1, MessageID: "m1", At: f.clk.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.Counts{Submitted: 2, Confirmed: 1}); sh.Counts != want {
		t.Fatalf("after the crash and the next BeginTurn: counts %+v, want %+v (the shard was not marked dirty before the item write)", sh.Counts, want)
	}
}

// TestResumeFinishesAJobWhoseShardsAllEnded: a shard can finish while its
// job is paused (its last items were already in flight); the finish then
// cannot end the paused job, and resume kicks no finished shard. Resume
// must end the job itself, or it stays running for ever (found by the
// chaos suite, seed 1000004).
func TestResumeFinishesAJobWhoseShardsAllEnded(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	jobID, items := f.runningJob(t, 2)
	if _, err := f.ctl.Pause(ctx, jobID); err != nil {
		t.Fatal(err)
	}
	sh, err := f.store.GetShard(ctx, jobID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ups []store.ItemUpdate
	for _, it := range items {
		ups = append(ups, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed})
	}
	res, err := f.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: 0, Updates: ups, At: f.clk.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.FoldOutsideTurn(ctx, f.store, sh, res.Delta, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: jobID, Index: 0, To: store.ShardCompleted, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	v, err := f.ctl.Resume(ctx, jobID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Job.Status != store.JobCompleted {
		t.Fatalf("after resume the job is %s with its only shard %s; want completed", v.Job.Status, v.Shards[0].Status)
	}
}

// lostWrite applies item writes and then reports them failed, as a store
// whose answer is lost does.
type lostWrite struct{ store.Store }

func (l lostWrite) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	if _, err := l.Store.UpdateItems(ctx, p); err != nil {
		return store.UpdateItemsResult{}, err
	}
	return store.UpdateItemsResult{}, errors.New("answer lost after the write")
}

// TestResolveWithLostAnswerLeavesTrueCounts (found by the chaos suite): in
// a cancelled job, whose shard gets no more turns to recount it, an
// operator's "delivered" whose item write was applied but answered with an
// error must not leave the counts at "submitted".
func TestResolveWithLostAnswerLeavesTrueCounts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	jobID, items := f.runningJob(t, 2)
	f.mark(t, jobID, store.ItemError{Category: store.CategoryUncertain, Message: "response timeout"}, items[0].Seq)
	if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: jobID, To: store.JobCancelled, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: jobID, Index: 0, To: store.ShardCancelled, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	lossy := &control.Controller{Store: lostWrite{f.store}, Queue: f.ctl.Queue, Clock: f.clk}
	if _, err := lossy.Resolve(ctx, jobID, items[0].Seq, control.Delivered); err == nil {
		t.Fatal("the lost answer was not reported")
	}
	sh, err := f.store.GetShard(ctx, jobID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Counts.Confirmed != 1 || sh.Counts.Submitted != 1 {
		t.Fatalf("counts %+v; want the confirmed item counted (1 confirmed, 1 submitted)", sh.Counts)
	}
}
