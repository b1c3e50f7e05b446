package sender_test

import (
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
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
	h := startHeldTurn(t, p, "strag")
	h.leftRunning(t, clk) // the batch stops waiting: the call is a straggler
	h.noCallFor(t, time.Second, "the first was unanswered, with MaxStragglers 1")
	h.release(t, p)
}
