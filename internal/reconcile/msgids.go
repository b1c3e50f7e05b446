package reconcile

import (
	"context"
	"fmt"
	"sync"

	"github.com/qunfa/qunfa/internal/store"
)

// msgSlot is an item under one claim.
type msgSlot struct {
	shard int
	seq   int64
	claim string
}

// msgIDs finds items' provider message ids from their jobs' MsgCalls,
// reading each job's calls once a page.
type msgIDs struct {
	store store.MsgCallStore
	mu    sync.Mutex
	jobs  map[string]map[msgSlot]string
}

// of is the message id the item's current claim was accepted under ("" none).
func (m *msgIDs) of(ctx context.Context, it store.Item) (string, error) {
	if m.store == nil {
		return "", nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	slots, ok := m.jobs[it.JobID]
	if !ok {
		calls, err := m.store.ListMsgCalls(ctx, it.JobID)
		if err != nil {
			return "", fmt.Errorf("provider message ids of job %s: %w", it.JobID, err)
		}
		slots = map[msgSlot]string{}
		for _, c := range calls {
			for _, seq := range c.Seqs {
				slots[msgSlot{c.Shard, seq, c.ClaimID}] = c.MsgID
			}
		}
		m.jobs[it.JobID] = slots
	}
	return slots[msgSlot{it.Shard, it.Seq, it.ClaimID}], nil
}
