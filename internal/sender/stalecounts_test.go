package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// allDoneCountsStore makes BeginTurn report the shard's counts as all
// confirmed (plausible counts, summing to its size) while its items are
// still pending: counts a lost fold left behind.
type allDoneCountsStore struct {
	store.Store
}

func (s allDoneCountsStore) BeginTurn(ctx context.Context, p store.BeginTurnParams) (store.Shard, error) {
	sh, err := s.Store.BeginTurn(ctx, p)
	if err == nil {
		sh.Counts = store.Counts{Confirmed: sh.Size}
	}
	return sh, err
}

// TestCountsSayingNothingPendingAreRecounted: a turn whose shard counts
// say nothing is pending recounts the items before it ends; when the
// recount finds pending items the turn goes on and sends them, each once,
// instead of ending with them left unsent.
func TestCountsSayingNothingPendingAreRecounted(t *testing.T) {
	t.Parallel()
	p, _ := fakePipeline(t, sender.Config{ClaimBatch: 10})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "recount")
	s2 := *p.sender
	s2.Store = allDoneCountsStore{Store: p.store}
	res, err := s2.HandleTurn(context.Background(), p.nextTurn(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 3 {
		t.Fatalf("turn %+v: sent %d, want the 3 pending items the recount found", res, res.Sent)
	}
	for _, it := range p.items(job.Job.ID) {
		if it.Status != store.ItemConfirmed {
			t.Fatalf("item %s is %s, want confirmed", it.To, it.Status)
		}
	}
	p.checkExactlyOnce(job.Job.ID)
}
