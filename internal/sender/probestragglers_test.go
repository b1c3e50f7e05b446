package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
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
	h := startHeldTurn(t, p, "probestrag")
	if _, err := p.sender.Breakers.Open(ctx, tenant, "a", "test: opened by another shard"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(31 * time.Second) // the cool-down is over: the next gate probes
	h.leftRunning(t, clk)         // and the call is a straggler
	h.noCallFor(t, 500*time.Millisecond, "the straggler was unanswered and the breaker half-open")
	h.release(t, p)
	if br, err := p.store.GetBreaker(ctx, tenant, "a"); err != nil || br.State != store.BreakerClosed {
		t.Fatalf("breaker %+v (%v), want closed by the turn's probe", br, err)
	}
}
