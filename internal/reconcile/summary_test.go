package reconcile_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

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
	// An outside change marked the finished shard dirty and died before
	// its fold.
	if _, err := store.BeginOutsideTurn(ctx, f.store, done, 0); err != nil {
		t.Fatal(err)
	}
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
