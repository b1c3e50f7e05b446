package queuecap_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/queuecap"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
)

// TestLongHandBackIsCapped: a shard whose next token is days away (a tiny
// rate) hands itself back with that delay; past the queue's 12 h
// visibility limit every hand-back failed and the shard was stuck. Capped,
// the message comes back after the cap and the turn simply looks again.
func TestLongHandBackIsCapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	raw, err := sqlitequeue.Open(ctx, filepath.Join(t.TempDir(), "q.db"), sqlitequeue.Options{Name: "w", DeadLetter: "d", MaxReceiveCount: 10, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	q := queuecap.New(raw, 15*time.Minute)
	if _, err := q.Send(ctx, queue.SendParams{Group: "g", DedupID: "d1", Body: []byte("turn")}); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v %v", msgs, err)
	}
	// 0.00001 tokens/s: the next token is 27.8 h away.
	if err := q.ChangeVisibility(ctx, msgs[0].ReceiptHandle, 100000*time.Second); err != nil {
		t.Fatalf("hand back by 27.8 h: %v", err)
	}
	clk.Advance(15*time.Minute - time.Second)
	if again, _ := q.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute}); len(again) != 0 {
		t.Fatal("visible before the cap")
	}
	clk.Advance(time.Second)
	if again, err := q.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute}); err != nil || len(again) != 1 {
		t.Fatalf("not visible after the cap: %v %v", again, err)
	}
	// Shorter delays pass unchanged.
	if got := queuecap.Cap(time.Minute, 15*time.Minute); got != time.Minute {
		t.Fatalf("Cap(1m) = %v", got)
	}
}
