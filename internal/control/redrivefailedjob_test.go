package control_test

import (
	"context"
	"testing"

	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
)

// TestRedriveOfAFailedJobDyingLeavesItRunning: a job whose every item
// failed ends failed, not partial. A redrive of it that dies after writing
// its items back to pending (here: its fold fails) must leave the job
// running with its shard, as for a partial job (the job is reopened before
// its items go back to pending); otherwise, until a reconciler pass
// notices the running shard, the operator sees a failed — final — job
// holding pending items.
func TestRedriveOfAFailedJobDyingLeavesItRunning(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	jobID, items := f.runningJob(t, 2)
	sh, err := f.store.GetShard(ctx, jobID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ups []store.ItemUpdate
	for _, it := range items {
		ups = append(ups, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed,
			Error: &store.ItemError{Category: store.CategoryExhausted, Message: "retries used up"}})
	}
	res, err := f.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: 0, At: f.clk.Now(), Updates: ups})
	if err != nil || len(res.Rejected) > 0 {
		t.Fatalf("fail the items: %v, rejected %v", err, res.Rejected)
	}
	if _, err := store.FoldOutsideTurn(ctx, f.store, sh, res.Delta, res.FailuresDelta); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: jobID, Index: 0, To: store.ShardFailed, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := sender.FinishJob(ctx, f.store, nil, nil, jobID, f.clk.Now()); err != nil {
		t.Fatal(err)
	}
	if v, _ := f.store.GetJob(ctx, jobID); v.Job.Status != store.JobFailed {
		t.Fatalf("job %s; want failed (every item failed)", v.Job.Status)
	}
	ctl := &control.Controller{Store: failFold{f.store}, Queue: f.ctl.Queue, Clock: f.clk}
	if _, err := ctl.Redrive(ctx, jobID, store.CategoryExhausted); err == nil {
		t.Fatal("redrive with a failing fold: want an error")
	}
	v, err := f.store.GetJob(ctx, jobID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Job.Status != store.JobRunning || v.Shards[0].Status != store.ShardRunning {
		t.Fatalf("job %s, shard %s after a redrive of a failed job that died; want both running", v.Job.Status, v.Shards[0].Status)
	}
	if c, err := f.store.RecountShard(ctx, jobID, 0); err != nil || c.Counts.Pending != 2 {
		t.Fatalf("recount %+v, %v; want the 2 redriven items pending", c.Counts, err)
	}
}
