package sqsqueue

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/queue"
)

// TestDepth: the local stack's queue gauge reads the visible and the
// in-flight messages as SQS counts them.
func TestDepth(t *testing.T) {
	ctx := context.Background()
	client := emulatorClient(t)
	url, _, err := CreateQueues(ctx, client, uniqueName(t), 10)
	if err != nil {
		t.Fatal(err)
	}
	q := New(client, url)
	for _, g := range []string{"a", "b", "c"} {
		if _, err := q.Send(ctx, queue.SendParams{Group: g, DedupID: g, Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	visible, inFlight, err := q.Depth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if visible != 2 || inFlight != 1 {
		t.Errorf("depth: %d visible, %d in flight; want 2 and 1", visible, inFlight)
	}
}
