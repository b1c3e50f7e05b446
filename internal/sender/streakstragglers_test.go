package sender_test

import (
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
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
	h := startHeldTurn(t, p, "streakstrag")
	h.leftRunning(t, clk) // the batch stops waiting: the call is a straggler
	h.noCallFor(t, time.Second, "the first was unanswered, with a streak of 1")
	h.release(t, p)
}
