package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestTurnWaitsForItsStragglersAtMaxStragglers: a call still running
// after StragglerWait is left as a straggler and the turn goes on, but at
// MaxStragglers of them the turn waits for their answers before it claims
// again: no more calls are left unanswered than MaxStragglers (with 1, the
// next recipient is not sent while the first call is out). Once the call
// answers, the turn sends the rest, each recipient once.
func TestTurnWaitsForItsStragglersAtMaxStragglers(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 1, StragglerWait: time.Second, MaxStragglers: 1})
	p.account("a", 1000, 1000, 0, 1)
	hp := &holdingProvider{Provider: p.sender.Provider, to: "user-0", held: make(chan struct{}), release: make(chan struct{}),
		answered: make(chan struct{}, 100)}
	s2 := *p.sender
	s2.Provider = hp
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "strag")
	out := make(chan sender.Result, 1)
	msg := p.nextTurn(time.Hour)
	go func() {
		res, err := s2.HandleTurn(context.Background(), msg)
		if err != nil {
			t.Errorf("turn: %v", err)
		}
		out <- res
	}()
	recv(t, hp.held, "the first call")
	clk.Advance(time.Second) // the batch stops waiting: the call is a straggler
	select {
	case <-hp.answered:
		t.Fatal("a second call went out while the first was unanswered, with MaxStragglers 1")
	case <-time.After(time.Second):
	}
	close(hp.release)
	res := recv(t, out, "the turn after the straggler answered")
	if res.Sent != 3 {
		t.Fatalf("turn %+v, want 3 sent", res)
	}
	for _, it := range p.items(job.Job.ID) {
		if it.Status != store.ItemConfirmed {
			t.Fatalf("item %s is %s, want confirmed", it.To, it.Status)
		}
	}
	p.checkExactlyOnce(job.Job.ID)
}
