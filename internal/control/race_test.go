package control_test

import (
	"context"
	"errors"
	"testing"

	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

// hookStore runs a hook once, right after the first UpdateItems that
// changes something: the moment between an outside change's item write
// and the fold of its counts.
type hookStore struct {
	store.Store
	hook func()
}

func (h *hookStore) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	res, err := h.Store.UpdateItems(ctx, p)
	if f := h.hook; err == nil && f != nil && len(res.Rejected) < len(p.Updates) {
		h.hook = nil
		f()
	}
	return res, err
}

// A redrive racing the job's last shard finishing: the finish read the
// counts before the redrive folded them, and finished the job after the
// redrive had looked at its status. The redriven item must not be left
// pending in a partial job (chaos seed 1000247).
func TestRedriveRacingFinish(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	p, items := storetest.NewJob("t1", 2, 2)
	if _, err := f.store.CreateJob(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := f.store.PutItems(ctx, store.PutItemsParams{JobID: p.Job.ID, Items: items}); err != nil {
		t.Fatal(err)
	}
	jobID := p.Job.ID
	now := f.clk.Now()
	if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: jobID, To: store.JobRunning, At: now}); err != nil {
		t.Fatal(err)
	}
	// Shard 0 finished with one confirmed and one exhausted item; shard 1
	// has sent everything and is about to finish.
	settle := func(index int, outcomes ...store.ItemStatus) {
		t.Helper()
		if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: jobID, Index: index, To: store.ShardRunning, At: now}); err != nil {
			t.Fatal(err)
		}
		sh, err := f.store.GetShard(ctx, jobID, index)
		if err != nil {
			t.Fatal(err)
		}
		claim, err := f.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: jobID, Index: index, Max: 10, Now: now, ClaimID: "c"})
		if err != nil {
			t.Fatal(err)
		}
		var ups []store.ItemUpdate
		for i, it := range claim.Items {
			u := store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: "c", To: outcomes[i]}
			if outcomes[i] == store.ItemFailed {
				u.Error = &store.ItemError{Category: store.CategoryExhausted, Message: "retries used up"}
			}
			ups = append(ups, u)
		}
		res, err := f.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: index, Updates: ups, At: now})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.FoldOutsideTurn(ctx, f.store, sh, claim.Delta.Add(res.Delta), res.FailuresDelta); err != nil {
			t.Fatal(err)
		}
	}
	settle(0, store.ItemConfirmed, store.ItemFailed)
	settle(1, store.ItemConfirmed, store.ItemConfirmed)
	if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: jobID, Index: 0, To: store.ShardCompleted, At: now}); err != nil {
		t.Fatal(err)
	}

	// The redrive writes the item back to pending; before it folds the
	// counts, shard 1 completes and the job is finished.
	hs := &hookStore{Store: f.store}
	hs.hook = func() {
		if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: jobID, Index: 1, To: store.ShardCompleted, At: now}); err != nil {
			t.Fatal(err)
		}
		if err := sender.FinishJob(ctx, f.store, nil, nil, jobID, now); err != nil {
			t.Fatal(err)
		}
	}
	ctl := &control.Controller{Store: hs, Queue: f.ctl.Queue, Clock: f.clk}
	n, err := ctl.Redrive(ctx, jobID, store.CategoryExhausted)
	if err != nil || n != 1 {
		t.Fatalf("redrive: %d, %v; want 1 item", n, err)
	}
	v, err := f.store.GetJob(ctx, jobID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Job.Status != store.JobRunning || store.ShardFinal(v.Shards[0].Status) {
		t.Fatalf("job %s, shard 0 %s after the redrive; want both running, to send the redriven item", v.Job.Status, v.Shards[0].Status)
	}
	if v.Counts().Pending != 1 {
		t.Fatalf("counts %+v; want 1 pending", v.Counts())
	}
	msgs, err := f.ctl.Queue.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: 60e9})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("%d turns enqueued; want one, for shard 0", len(msgs))
	}
}

// failFold fails every fold of counts made outside a turn.
type failFold struct{ store.Store }

func (failFold) AddShardCounts(context.Context, store.AddShardCountsParams) (store.Shard, error) {
	return store.Shard{}, errors.New("store down")
}

// A redrive of a finished job that dies after writing its items back to
// pending (here: its fold fails) leaves the shard and the job running, so
// the reconciler re-drives the shard; before, they stayed finished with
// the items pending for ever (chaos seeds 2000467, 2000468). The same for
// a job whose every item failed, which ends failed, not partial: the job
// is reopened before its items go back to pending, else until a reconciler
// pass noticed the running shard the operator saw a failed — final — job
// holding pending items.
func TestRedriveDyingLeavesShardRunning(t *testing.T) {
	failed := store.ItemUpdate{From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed,
		Error: &store.ItemError{Category: store.CategoryExhausted, Message: "retries used up"}}
	for _, tc := range []struct {
		name     string
		first    store.ItemStatus // the first item's end; the second fails
		shardTo  store.ShardStatus
		jobWant  store.JobStatus
		redriven int64
	}{
		{"partial job", store.ItemConfirmed, store.ShardCompleted, store.JobPartial, 1},
		{"failed job", store.ItemFailed, store.ShardFailed, store.JobFailed, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t)
			jobID, items := f.runningJob(t, 2)
			sh, err := f.store.GetShard(ctx, jobID, 0)
			if err != nil {
				t.Fatal(err)
			}
			first := store.ItemUpdate{Seq: items[0].Seq, From: store.ItemSubmitted, ClaimID: "c1", To: tc.first}
			if tc.first == store.ItemFailed {
				first = failed
				first.Seq = items[0].Seq
			}
			second := failed
			second.Seq = items[1].Seq
			res, err := f.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: 0, At: f.clk.Now(), Updates: []store.ItemUpdate{first, second}})
			if err != nil || len(res.Rejected) > 0 {
				t.Fatalf("settle the items: %v, rejected %v", err, res.Rejected)
			}
			if _, err := store.FoldOutsideTurn(ctx, f.store, sh, res.Delta, res.FailuresDelta); err != nil {
				t.Fatal(err)
			}
			if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: jobID, Index: 0, To: tc.shardTo, At: f.clk.Now()}); err != nil {
				t.Fatal(err)
			}
			if err := sender.FinishJob(ctx, f.store, nil, nil, jobID, f.clk.Now()); err != nil {
				t.Fatal(err)
			}
			if v, _ := f.store.GetJob(ctx, jobID); v.Job.Status != tc.jobWant {
				t.Fatalf("job %s; want %s", v.Job.Status, tc.jobWant)
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
				t.Fatalf("job %s, shard %s after a redrive that died; want both running (the reconciler re-drives a running shard)", v.Job.Status, v.Shards[0].Status)
			}
			if c, err := f.store.RecountShard(ctx, jobID, 0); err != nil || c.Counts.Pending != tc.redriven {
				t.Fatalf("recount %+v, %v; want the %d redriven items pending", c.Counts, err, tc.redriven)
			}
		})
	}
}
