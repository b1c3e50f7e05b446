package sender_test

import (
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestStragglersAreLoggedWhenLeftRunning: when a batch is recorded
// without a call still running after StragglerWait, the operator reads a
// stragglerWarning saying how many calls were left; a batch whose calls all
// answered logs none.
func TestStragglersAreLoggedWhenLeftRunning(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 3, StragglerWait: time.Second})
	p.account("a", 1000, 1000, 0, 1)
	logs := &lockedBuffer{}
	p.sender.Log = slog.New(slog.NewTextHandler(logs, nil))

	plain := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "plain")
	p.driveUntil(clk, final, plain.Job.ID)
	if strings.Contains(logs.String(), stragglerWarning) || strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("a batch whose three calls answered and were recorded logged %q or an error:\n%s", stragglerWarning, logs)
	}

	// Three calls in one batch, user-0's held. How many of the other two
	// the batch saw answer before its deadline is a race (both are ready
	// at once), so the count is 1 to 3.
	h := startHeldTurn(t, p, "held")
	h.leftRunning(t, clk)
	h.release(t, p)
	var lines []string
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(l, stragglerWarning) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !regexp.MustCompile(` calls=[123] `).MatchString(lines[0]) {
		t.Fatalf("stragglerWarnings %q, want one saying how many of the batch's three calls were left running", lines)
	}
}
