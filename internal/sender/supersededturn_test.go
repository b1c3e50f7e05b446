package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestSupersededTurnStopsWithinAccountRefresh: a turn whose shard a newer
// turn took over (the reconciler's redrive of a turn it judged lost) stops
// at its first batch AccountRefresh after it last read the shard, even
// with no fold in between to tell it: it sends nothing more, leaving the
// shard's items to the newer turn. The newer turn begins during the old
// one's first provider call, which takes exactly AccountRefresh on the
// fake clock.
func TestSupersededTurnStopsWithinAccountRefresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// One long turn that folds only at its end, one recipient a batch, no
	// token waits: the fake clock moves only in the provider's call.
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 1, TurnDuration: time.Hour, FoldEvery: 1000,
		AccountRefresh: time.Second, StragglerWait: time.Minute})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 6)}, "superseded")
	var beginErr error
	p.sender.Provider = &onCall{Provider: p.sender.Provider, at: 1, hook: func() {
		_, beginErr = p.store.BeginTurn(ctx, store.BeginTurnParams{JobID: job.Job.ID, Index: 0, Turn: 2, MessageID: "newer-turn", At: clk.Now()})
		clk.Advance(time.Second)
	}}
	res, err := p.sender.HandleTurn(ctx, p.nextTurn(time.Hour))
	if beginErr != nil {
		t.Fatalf("begin the newer turn: %v", beginErr)
	}
	if err != nil || res.Disposition != sender.Done || res.Reason != "superseded" {
		t.Fatalf("old turn: %+v %v, want it done as superseded", res, err)
	}
	if n := len(p.deliveries()); n != 1 {
		t.Fatalf("the superseded turn sent %d recipients, want only the first (sent before the newer turn began)", n)
	}
	for _, it := range p.items(job.Job.ID) {
		if it.Seq > 0 && it.Status != store.ItemPending {
			t.Errorf("item %d is %s, want it left pending for the newer turn", it.Seq, it.Status)
		}
	}
}

// TestTurnSupersededAtItsFoldRecounts: a turn that learns at its fold
// that a newer turn took the shard over (the newer one began during its
// provider call, after the last state check) stops as superseded, not
// failed, and makes the shard's counts true from the items: its own
// delta cannot be folded, and the newer turn's recount came before the
// old turn recorded its call's answer.
func TestTurnSupersededAtItsFoldRecounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 1, TurnDuration: time.Hour, FoldEvery: 1,
		AccountRefresh: time.Hour, StragglerWait: time.Minute})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 6)}, "superseded-fold")
	var beginErr error
	p.sender.Provider = &onCall{Provider: p.sender.Provider, at: 1, hook: func() {
		_, beginErr = p.store.BeginTurn(ctx, store.BeginTurnParams{JobID: job.Job.ID, Index: 0, Turn: 2, MessageID: "newer-turn", At: clk.Now()})
	}}
	res, err := p.sender.HandleTurn(ctx, p.nextTurn(time.Hour))
	if beginErr != nil {
		t.Fatalf("begin the newer turn: %v", beginErr)
	}
	if err != nil || res.Disposition != sender.Done || res.Reason != "superseded" {
		t.Fatalf("old turn: %+v %v, want it done as superseded", res, err)
	}
	if n := len(p.deliveries()); n != 1 {
		t.Fatalf("the superseded turn sent %d recipients, want 1", n)
	}
	sh, err := p.store.GetShard(ctx, job.Job.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.Counts{Pending: 5, Confirmed: 1}); sh.Counts != want {
		t.Fatalf("shard counts %+v after the superseded fold, want %+v (true from the items)", sh.Counts, want)
	}
}
