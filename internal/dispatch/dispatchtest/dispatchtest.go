// Package dispatchtest records the shard turns a component under test
// enqueues.
package dispatchtest

import (
	"context"
	"sync"

	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/queue"
)

// Turns is a queue that records the turn of every message sent through it
// before passing it on; safe for concurrent use.
type Turns struct {
	queue.Queue
	mu   sync.Mutex
	sent []dispatch.Turn
}

// Send records the message's turn and sends it.
func (q *Turns) Send(ctx context.Context, p queue.SendParams) (queue.SendResult, error) {
	t, err := dispatch.Decode(p.Body)
	if err != nil {
		return queue.SendResult{}, err
	}
	q.mu.Lock()
	q.sent = append(q.sent, t)
	q.mu.Unlock()
	return q.Queue.Send(ctx, p)
}

// Sent is every turn recorded, in the order sent.
func (q *Turns) Sent() []dispatch.Turn {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]dispatch.Turn(nil), q.sent...)
}

// Shards is the shards a turn was sent for, each with its last turn.
func (q *Turns) Shards() map[int]int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := map[int]int64{}
	for _, t := range q.sent {
		out[t.Shard] = t.Turn
	}
	return out
}
