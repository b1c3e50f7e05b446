package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
)

// batchQueue sends batches through the embedded queue one message at a
// time, records the batches it was given, and fails the messages of the
// groups in fail, as SQS answers a batch's Failed entries.
type batchQueue struct {
	queue.Queue
	batches [][]queue.SendParams
	fail    map[string]bool
}

func (b *batchQueue) SendBatch(ctx context.Context, p []queue.SendParams) ([]queue.SendBatchResult, error) {
	b.batches = append(b.batches, p)
	out := make([]queue.SendBatchResult, len(p))
	for i, m := range p {
		if b.fail[m.Group] {
			out[i].Err = errors.New("throttled")
			continue
		}
		out[i].SendResult, out[i].Err = b.Queue.Send(ctx, m)
	}
	return out, nil
}

func openQueue(t *testing.T) queue.Queue {
	t.Helper()
	q, err := sqlitequeue.Open(context.Background(), filepath.Join(t.TempDir(), "q.db"),
		sqlitequeue.Options{Name: "work", Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// received drains q and answers the turns, by group.
func received(t *testing.T, q queue.Queue) map[string]dispatch.Turn {
	t.Helper()
	got := map[string]dispatch.Turn{}
	for {
		msgs, err := q.Receive(context.Background(), queue.ReceiveParams{Max: queue.MaxReceive, VisibilityTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return got
		}
		for _, m := range msgs {
			turn, err := dispatch.Decode(m.Body)
			if err != nil || m.DedupID != dispatch.DedupID(turn.JobID, turn.Shard, turn.Turn) {
				t.Fatalf("message %+v: %v", m, err)
			}
			got[m.Group] = turn
			if err := q.Delete(context.Background(), m.ReceiptHandle); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestSendTurnsBatches: a queue that sends batches gets every turn in one
// SendBatch, each in its shard's group with its turn's dedup id; a turn
// the batch could not send is in the error, by name, and only it — the
// others are on the queue. A queue without batches gets them one by one.
func TestSendTurnsBatches(t *testing.T) {
	var turns []dispatch.Turn
	for shard := range 12 {
		turns = append(turns, dispatch.Turn{JobID: "job-1", Shard: shard, Turn: 1})
	}
	bq := &batchQueue{Queue: openQueue(t), fail: map[string]bool{dispatch.Group("job-1", 7): true}}
	err := dispatch.SendTurns(context.Background(), bq, turns)
	if err == nil || !strings.Contains(err.Error(), "shard job-1/7") || strings.Count(err.Error(), "enqueue turn") != 1 {
		t.Errorf("error %v, want only the turn of shard 7", err)
	}
	if len(bq.batches) != 1 || len(bq.batches[0]) != len(turns) {
		t.Fatalf("batches %d, want one of %d messages", len(bq.batches), len(turns))
	}
	got := received(t, bq.Queue)
	if len(got) != len(turns)-1 {
		t.Errorf("%d turns on the queue, want %d", len(got), len(turns)-1)
	}
	for _, tn := range turns {
		g := dispatch.Group(tn.JobID, tn.Shard)
		if _, ok := got[g]; ok == (tn.Shard == 7) {
			t.Errorf("shard %d on the queue: %v", tn.Shard, ok)
		}
	}

	plain := openQueue(t)
	if err := dispatch.SendTurns(context.Background(), plain, turns); err != nil {
		t.Fatal(err)
	}
	if got := received(t, plain); len(got) != len(turns) || got[dispatch.Group("job-1", 11)] != turns[11] {
		t.Errorf("plain queue: %d turns %v, want all %d", len(got), fmt.Sprint(got[dispatch.Group("job-1", 11)]), len(turns))
	}
}
