package control_test

import (
	"context"
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
