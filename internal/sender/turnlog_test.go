package sender_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"log/slog"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestTurnLogsToTheSendersLogger: a turn's log lines go to the Sender's
// Log, with the job and shard they are about (an operator reads why a
// turn ended there), and a Sender without a Log works its turns with the
// default logger.
func TestTurnLogsToTheSendersLogger(t *testing.T) {
	t.Parallel()
	for _, withLog := range []bool{true, false} {
		name := "without a Log"
		if withLog {
			name = "with a Log"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, _ := fakePipeline(t, sender.Config{ClaimBatch: 5})
			p.account("a", 1000, 1000, 0, 1)
			var logs bytes.Buffer
			s2 := *p.sender
			s2.Log = nil
			if withLog {
				s2.Log = slog.New(slog.NewTextHandler(&logs, nil))
			}
			job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "log")
			res, err := s2.HandleTurn(context.Background(), p.nextTurn(time.Hour))
			if err != nil || res.Sent != 3 {
				t.Fatalf("turn: %+v, %v; want 3 sent", res, err)
			}
			if !withLog {
				return
			}
			got := logs.String()
			if !strings.Contains(got, `msg="turn ended"`) || !strings.Contains(got, "job="+job.Job.ID) {
				t.Fatalf("the Sender's Log has no \"turn ended\" line of job %s:\n%s", job.Job.ID, got)
			}
		})
	}
}
