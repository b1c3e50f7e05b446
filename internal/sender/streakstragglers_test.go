package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestStragglersAtTheBreakerStreakAreWaitedFor: on an account whose
// breaker opens after 1 failed send, a call left running after
// StragglerWait is as many unanswered sends as the streak allows: the
// turn sends nothing more until it answers (MaxStragglers would allow
// more), then goes on and sends the rest in the same turn, each once.
func TestStragglersAtTheBreakerStreakAreWaitedFor(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5, StragglerWait: time.Second, MaxStragglers: 10})
	breakerAccount(p, "a", 1)
	hp := &holdingProvider{Provider: p.sender.Provider, to: "user-0", held: make(chan struct{}), release: make(chan struct{}),
		answered: make(chan struct{}, 100)}
	s2 := *p.sender
	s2.Provider = hp
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "streakstrag")
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
		t.Fatal("a second call went out while the first was unanswered, with a streak of 1")
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
