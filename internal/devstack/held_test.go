package devstack

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
)

// visibilityLog records the visibility changes that reach the queue.
type visibilityLog struct {
	queue.Queue
	mu      sync.Mutex
	changes []time.Duration
}

func (v *visibilityLog) ChangeVisibility(ctx context.Context, h string, d time.Duration) error {
	v.mu.Lock()
	v.changes = append(v.changes, d)
	v.mu.Unlock()
	return v.Queue.ChangeVisibility(ctx, h, d)
}

func (v *visibilityLog) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.changes)
}

// TestHeldMessagesStopRenewingWhenTheHandlerDecides: a held message's
// visibility is renewed until the handler hands it back or deletes it;
// from then on a renewal never overrides the handler's own visibility (a
// hand-back delay would otherwise become the renewal's).
func TestHeldMessagesStopRenewingWhenTheHandlerDecides(t *testing.T) {
	ctx := context.Background()
	q, err := sqlitequeue.Open(ctx, filepath.Join(t.TempDir(), "q.db"), sqlitequeue.Options{Name: "work", DeadLetter: "work-dlq", MaxReceiveCount: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	for _, g := range []string{"a", "b"} {
		if _, err := q.Send(ctx, queue.SendParams{Group: g, DedupID: g, Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: 30 * time.Second})
	if err != nil || len(msgs) != 2 {
		t.Fatalf("receive: %v, %d messages", err, len(msgs))
	}
	handedBack, done := msgs[0].ReceiptHandle, msgs[1].ReceiptHandle
	rec := &visibilityLog{Queue: q}
	held := NewHeldMessages(rec)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	handles := []string{handedBack, done}
	held.hold(handles)

	held.renew(ctx, handles, 30*time.Second, log)
	if n := rec.count(); n != 2 {
		t.Fatalf("a renewal of two held messages changed %d visibilities, want 2", n)
	}
	// The handler hands one back for 1 s and deletes the other.
	if err := held.ChangeVisibility(ctx, handedBack, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := held.Delete(ctx, done); err != nil {
		t.Fatal(err)
	}
	held.renew(ctx, handles, 30*time.Second, log)
	if n := rec.count(); n != 3 {
		t.Fatalf("after the handler's decisions a renewal still changed visibilities: %v", rec.changes)
	}
	if last := rec.changes[2]; last != time.Second {
		t.Errorf("the handed-back message's visibility is %v, want the handler's 1s", last)
	}
	// A message never held is passed through untouched.
	if err := held.ChangeVisibility(ctx, "unknown", time.Second); err == nil {
		t.Errorf("a handle the queue never issued was accepted")
	}
}
