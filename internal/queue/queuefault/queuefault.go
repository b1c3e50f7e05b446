// Package queuefault is a fault-injecting decorator of the queue port, for
// chaos tests: a received message may be delivered twice (the copy is
// handed out again, as an at-least-once queue may) and its visibility may
// expire early (it comes back while its first receiver still works it).
// Decisions come from a seeded source, so a failing run replays.
package queuefault

import (
	"context"
	"math/rand/v2"
	"sync"

	"github.com/qunfa/qunfa/internal/queue"
)

// Config sets the faults; ratios are per received message.
type Config struct {
	Seed uint64
	// DuplicateRatio: the message is returned twice by this Receive.
	DuplicateRatio float64
	// ExpireRatio: the message's visibility is reset to 0 at once, so the
	// next Receive hands it out again.
	ExpireRatio float64
}

// Queue injects delivery faults into an inner queue.
type Queue struct {
	queue.Queue
	cfg Config

	mu      sync.Mutex
	rnd     *rand.Rand
	enabled bool
	counts  map[string]int
}

var _ queue.Queue = (*Queue)(nil)

// New wraps q. Faults are on until Heal.
func New(q queue.Queue, cfg Config) *Queue {
	return &Queue{Queue: q, cfg: cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e37)), enabled: true, counts: map[string]int{}}
}

// Heal turns every fault off.
func (q *Queue) Heal() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.enabled = false
}

// Injected returns how many faults of each kind were injected.
func (q *Queue) Injected() map[string]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make(map[string]int, len(q.counts))
	for k, v := range q.counts {
		out[k] = v
	}
	return out
}

// Receive receives from the inner queue and injects duplicates and early
// expiries.
func (q *Queue) Receive(ctx context.Context, p queue.ReceiveParams) ([]queue.Message, error) {
	msgs, err := q.Queue.Receive(ctx, p)
	if err != nil {
		return msgs, err
	}
	out := make([]queue.Message, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, m)
		q.mu.Lock()
		dup := q.enabled && q.rnd.Float64() < q.cfg.DuplicateRatio
		expire := q.enabled && q.rnd.Float64() < q.cfg.ExpireRatio
		if dup {
			q.counts["duplicate"]++
		}
		if expire {
			q.counts["expire"]++
		}
		q.mu.Unlock()
		if dup {
			out = append(out, m)
		}
		if expire {
			if err := q.Queue.ChangeVisibility(ctx, m.ReceiptHandle, 0); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}
