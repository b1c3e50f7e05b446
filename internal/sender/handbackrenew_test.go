package sender_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestHandBackRenewedBeforeTheMaxReceiveCount: every hand-back counts as a
// receive of the turn's message, so a message already received
// RenewAfterReceives times (or one without a receipt handle, which cannot
// be handed back) is replaced by a fresh continuation instead: the shard
// never reaches the queue's max-receive count and its dead-letter queue.
// Below that count the message itself is handed back with the delay.
func TestHandBackRenewedBeforeTheMaxReceiveCount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		receives int
		noHandle bool
		renewed  bool
	}{
		{"received once less than RenewAfterReceives", 3, false, false},
		{"received RenewAfterReceives times", 4, false, true},
		{"no receipt handle", 1, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p, clk := fakePipeline(t, sender.Config{ClaimBatch: 10, MaxWait: 300 * time.Millisecond, RenewAfterReceives: 4})
			p.account("a", 2, 2, 0, 1) // a token every 500 ms: the turn hands back after one send
			job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 5)}, "renew")
			msg := p.nextTurn(time.Minute)
			msg.ReceiveCount = tc.receives
			handle := msg.ReceiptHandle
			if tc.noHandle {
				msg.ReceiptHandle = ""
			}
			res, err := p.sender.HandleTurn(ctx, msg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Sent != 1 {
				t.Fatalf("sent %d before handing back, want 1", res.Sent)
			}
			if !tc.renewed {
				if res.Disposition != sender.HandedBack || res.Delay < 500*time.Millisecond {
					t.Fatalf("result %+v, want the message handed back with the token's delay", res)
				}
				return
			}
			if res.Disposition != sender.Done || !strings.HasSuffix(res.Reason, "(renewed)") {
				t.Fatalf("result %+v, want done with a fresh continuation", res)
			}
			if err := p.queue.Delete(ctx, handle); err != nil {
				t.Fatal(err) // as the event source deletes a message that is done
			}
			msgs, err := p.queue.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			var continuation bool
			for _, m := range msgs {
				turn, err := dispatch.Decode(m.Body)
				if err != nil {
					t.Fatal(err)
				}
				if m.ID != msg.ID && turn.Turn == 2 && m.ReceiveCount == 1 {
					continuation = true
				}
			}
			if !continuation {
				t.Fatalf("messages %+v: want a fresh continuation (turn 2, first receive)", msgs)
			}
			if v := p.driveUntil(clk, final, job.Job.ID); v.Job.Status != store.JobCompleted {
				t.Fatalf("job %s %+v", v.Job.Status, v.Counts())
			}
			p.checkExactlyOnce(job.Job.ID)
		})
	}
}
