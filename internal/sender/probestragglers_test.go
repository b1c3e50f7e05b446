package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestProbeWaitsForTheTurnsStragglers: a turn whose account's breaker
// opened and went half-open while one of its calls was still out takes
// the probe, waits for that call's answer before sending the probe (one
// probe at a time), then goes on in the same turn: the probe closes the
// breaker and every recipient is sent once.
func TestProbeWaitsForTheTurnsStragglers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 1, StragglerWait: time.Second, MaxStragglers: 10, AccountRefresh: 5 * time.Second})
	breakerAccount(p, "a", 5)
	hp := &holdingProvider{Provider: p.sender.Provider, to: "user-0", held: make(chan struct{}), release: make(chan struct{}),
		answered: make(chan struct{}, 100)}
	s2 := *p.sender
	s2.Provider = hp
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "probestrag")
	out := make(chan sender.Result, 1)
	msg := p.nextTurn(time.Hour)
	go func() {
		res, err := s2.HandleTurn(ctx, msg)
		if err != nil {
			t.Errorf("turn: %v", err)
		}
		out <- res
	}()
	recv(t, hp.held, "the first call")
	if _, err := p.sender.Breakers.Open(ctx, tenant, "a", "test: opened by another shard"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(31 * time.Second) // the call is a straggler; the cool-down is over: the next gate probes
	select {
	case <-hp.answered:
		t.Fatal("a call went out while the straggler was unanswered and the breaker half-open")
	case <-time.After(500 * time.Millisecond):
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
	if br, err := p.store.GetBreaker(ctx, tenant, "a"); err != nil || br.State != store.BreakerClosed {
		t.Fatalf("breaker %+v (%v), want closed by the turn's probe", br, err)
	}
	p.checkExactlyOnce(job.Job.ID)
}
