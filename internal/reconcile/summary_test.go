package reconcile_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/store"
)

// dirtyFinishedShard makes a job of one shard whose one item was
// confirmed and whose shard completed, then marked dirty by an outside
// change that died before its fold; it returns the job's id.
func (f *fixture) dirtyFinishedShard(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	done := f.job(t, 1, 1, 1, 0)
	sh, err := store.BeginOutsideTurn(ctx, f.store, done, 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: done, Index: 0, At: f.clk.Now(),
		Updates: []store.ItemUpdate{{Seq: 1, From: store.ItemSubmitted, ClaimID: "c", To: store.ItemConfirmed}}})
	if err != nil || len(res.Rejected) > 0 {
		t.Fatalf("confirm: %v %v", err, res.Rejected)
	}
	if _, err := store.FoldOutsideTurn(ctx, f.store, sh, res.Delta, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: done, Index: 0, To: store.ShardCompleted, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.BeginOutsideTurn(ctx, f.store, done, 0); err != nil {
		t.Fatal(err)
	}
	return done
}

// TestPassSummaryLoggedForRedriveAndSweep: a pass whose only decisions are
// a re-driven shard and a swept dirty shard logs its summary (the counts
// of different decisions add up; none cancels another) and reports both.
func TestPassSummaryLoggedForRedriveAndSweep(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background() // a pass stops before its context's deadline
	logs := &records{}
	f.rec.Log = slog.New(logs)
	f.job(t, 1, 1, 0, 0) // running, nothing sent: stale in 5 minutes
	f.dirtyFinishedShard(t)
	f.clk.Advance(5 * time.Minute)
	rep, err := f.rec.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Redriven != 1 || rep.Swept != 1 || rep.Confirmed+rep.Repended+rep.UnderReview+rep.LookupFailed+rep.Mismatches != 0 {
		t.Fatalf("report %+v; want one shard re-driven and one swept, nothing else", rep)
	}
	if n := countOf(logs.msgs, "reconciled"); n != 1 {
		t.Fatalf("%d summaries logged, want 1 (%v)", n, logs.msgs)
	}
}

// foldFails is a store whose count folds fail (the process dies after an
// item write), and whose recounts fail too when recountDown.
type foldFails struct {
	store.Store
	recountDown bool
}

func (foldFails) AddShardCounts(context.Context, store.AddShardCountsParams) (store.Shard, error) {
	return store.Shard{}, errors.New("fold lost")
}

func (s foldFails) RecountShard(ctx context.Context, jobID string, index int) (store.Shard, error) {
	if s.recountDown {
		return store.Shard{}, errors.New("recount unavailable")
	}
	return s.Store.RecountShard(ctx, jobID, index)
}

// TestFailedRepairIsLogged: a settle whose fold fails recounts the shard
// at once; the warning that the shard stays dirty is logged exactly when
// that recount fails too (the counts are left wrong), never when it made
// them true.
func TestFailedRepairIsLogged(t *testing.T) {
	t.Parallel()
	const warning = "cannot recount a shard after a failed settle; it stays dirty"
	for _, recountDown := range []bool{true, false} {
		t.Run(map[bool]string{true: "recount fails", false: "recount repairs"}[recountDown], func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			logs := &records{}
			id := f.job(t, 1, 2, 2, 0)
			if err := f.store.PutMsgCall(ctx, store.MsgCall{Account: "acct-0", MsgID: "m-1", JobID: id, Shard: 0, ClaimID: "c", Seqs: []int64{1, 2}, At: f.clk.Now()}); err != nil {
				t.Fatal(err)
			}
			f.rec.Store, f.rec.MsgCalls, f.rec.Log = foldFails{Store: f.store, recountDown: recountDown}, f.store, slog.New(logs)
			if _, err := f.rec.SettleMsgCall(ctx, "acct-0", "m-1", reconcile.Settlement{To: store.ItemConfirmed}); err == nil {
				t.Fatal("a settle whose fold failed reported no error")
			}
			if got := countOf(logs.msgs, warning) == 1; got != recountDown {
				t.Fatalf("warning logged: %v, want %v (%v)", got, recountDown, logs.msgs)
			}
			if c := f.view(t, id).Counts(); (c.Confirmed == 2) == recountDown {
				t.Fatalf("counts %+v: the warning must say exactly when they were left wrong", c)
			}
		})
	}
}

// expiring is an item expirer that marks records given records.
type expiring struct{ records int }

func (e expiring) ExpireFinishedItems(context.Context, store.ExpireItemsParams) (store.ExpireItemsResult, error) {
	return store.ExpireItemsResult{Records: e.records, Jobs: min(e.records, 1)}, nil
}

// TestExpiryLoggedOnlyWhenItMarkedRecords: a pass that gave finished
// jobs' item records their expiry logs it; one with nothing to mark, every
// pass of a quiet day, logs nothing.
func TestExpiryLoggedOnlyWhenItMarkedRecords(t *testing.T) {
	t.Parallel()
	const msg = "finished jobs' items given their expiry"
	for _, marked := range []int{0, 1} {
		f := newFixture(t)
		logs := &records{}
		f.rec.Log, f.rec.Expirer, f.rec.Retention = slog.New(logs), expiring{marked}, time.Hour
		rep, err := f.rec.Run(context.Background()) // a pass stops before its context's deadline
		if err != nil || rep.ItemRecordsExpired != marked {
			t.Fatalf("pass: %+v %v; want %d records expired", rep, err, marked)
		}
		if n := countOf(logs.msgs, msg); n != marked {
			t.Fatalf("%d records expired: logged %d times, want %d (%v)", marked, n, marked, logs.msgs)
		}
	}
}

// clearFails is a store that cannot clear a dirty shard's mark.
type clearFails struct{ store.Store }

func (s clearFails) AddShardCounts(ctx context.Context, p store.AddShardCountsParams) (store.Shard, error) {
	if p.ClearDirty {
		return store.Shard{}, errors.New("store unavailable")
	}
	return s.Store.AddShardCounts(ctx, p)
}

// TestSweepErrorsAreReported: a pass that cannot clear the mark of a dirty
// final shard says so (the next pass sweeps it again) instead of
// reporting success, and the shard stays dirty.
func TestSweepErrorsAreReported(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background() // a pass stops before its context's deadline
	id := f.dirtyFinishedShard(t)
	f.rec.Store = clearFails{f.store}
	rep, err := f.rec.Run(ctx)
	if err == nil || rep.Swept != 0 {
		t.Fatalf("pass: %+v %v; want the sweep's error and nothing swept", rep, err)
	}
	if sh := f.view(t, id).Shards[0]; !sh.Dirty {
		t.Fatalf("shard %+v: its mark was cleared", sh)
	}
}
