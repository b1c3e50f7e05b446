package sender_test

import (
	"bytes"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/submit"
)

// lockedBuffer is a log destination written by a turn's goroutine and
// read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStragglersAreLoggedWhenLeftRunning: when a batch is recorded
// without a call still running after StragglerWait, the operator reads a
// warning saying how many calls were left; a batch whose calls all
// answered logs none.
func TestStragglersAreLoggedWhenLeftRunning(t *testing.T) {
	t.Parallel()
	const warning = "slow provider calls left running"
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 3, StragglerWait: time.Second})
	p.account("a", 1000, 1000, 0, 1)
	logs := &lockedBuffer{}
	p.sender.Log = slog.New(slog.NewTextHandler(logs, nil))

	plain := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "plain")
	p.driveUntil(clk, final, plain.Job.ID)
	if strings.Contains(logs.String(), warning) || strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("a batch whose three calls answered and were recorded logged %q or an error:\n%s", warning, logs)
	}

	// Three calls in one batch, user-0's held. How many of the other two
	// the batch saw answer before its deadline is a race (both are ready
	// at once), so the count is 1 to 3.
	h := startHeldTurn(t, p, "held")
	// Past StragglerWait until the batch is recorded without the held
	// call (its deadline may be set after the call started).
	deadline := time.Now().Add(waitLimit)
	for !strings.Contains(logs.String(), warning) {
		if time.Now().After(deadline) {
			t.Fatalf("no straggler warning after %v with user-0's call held:\n%s", waitLimit, logs)
		}
		clk.Advance(time.Second)
		time.Sleep(20 * time.Millisecond)
	}
	h.release(t, p)
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, warning) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !regexp.MustCompile(` calls=[123] `).MatchString(lines[0]) {
		t.Fatalf("warnings %q, want one saying how many of the batch's three calls were left running", lines)
	}
}
