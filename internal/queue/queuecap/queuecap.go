// Package queuecap is a decorator of the queue port that caps the delay of
// ChangeVisibility. A sender hands a shard back to the queue with the time
// until its next token; with a tiny rate that can be days, beyond what a
// queue takes (SQS: 12 h from the receive), and every hand-back would fail
// for ever. Capped, the message comes back after the cap, the turn finds
// no token yet and hands the shard back again (renewing the message after
// a few receives, so it never reaches the dead-letter queue).
package queuecap

import (
	"context"
	"time"

	"github.com/qunfa/qunfa/internal/queue"
)

// DefaultMax is the cap the runtimes use: far below the 12 h limit, which
// SQS counts from the message's receive, not from the call.
const DefaultMax = 15 * time.Minute

// Queue caps ChangeVisibility delays; everything else goes through.
type Queue struct {
	queue.Queue
	max time.Duration
}

var _ queue.Queue = (*Queue)(nil)

// New wraps q so that ChangeVisibility never asks for more than max
// (DefaultMax when max <= 0 or beyond the port's limit).
func New(q queue.Queue, max time.Duration) *Queue {
	if max <= 0 || max > queue.MaxVisibilityTimeout {
		max = DefaultMax
	}
	return &Queue{Queue: q, max: max}
}

// Cap returns d, at most max.
func Cap(d, max time.Duration) time.Duration { return min(d, max) }

// ChangeVisibility makes the message visible again after d, at most the
// cap.
func (q *Queue) ChangeVisibility(ctx context.Context, receiptHandle string, d time.Duration) error {
	return q.Queue.ChangeVisibility(ctx, receiptHandle, Cap(d, q.max))
}
