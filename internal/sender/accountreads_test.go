package sender_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// accountGets counts the sender's account reads.
type accountGets struct {
	store.Store
	n atomic.Int64
}

func (s *accountGets) GetAccount(ctx context.Context, tenant, account string) (store.Account, error) {
	s.n.Add(1)
	return s.Store.GetAccount(ctx, tenant, account)
}

// TestAccountReadSharedByTurns: the turns of one process (the shards of
// one invocation, a warm container's next invocations) read an account
// once per AccountRefresh between them, not once per turn; after the
// refresh window it is read again.
func TestAccountReadSharedByTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	p := newPipeline(t, pipelineOptions{clock: clk, sender: sender.Config{ClaimBatch: 10}, responseTimeout: 200 * time.Millisecond, shardSplit: 2})
	p.account("a", 1000, 1000, 0, 1)
	counted := &accountGets{Store: p.store}
	p.sender.Store = counted
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 8)}, "shared-account")
	if job.Job.ShardCount < 3 {
		t.Fatalf("%d shards, want several of one account", job.Job.ShardCount)
	}
	start := clk.Now()
	turns := len(p.step(ctx))
	if turns < 3 || clk.Now().Sub(start) >= time.Second {
		t.Fatalf("%d turns in %v: want several within one AccountRefresh", turns, clk.Now().Sub(start))
	}
	if n := counted.n.Load(); n != 1 {
		t.Errorf("%d account reads for %d turns within AccountRefresh, want 1", n, turns)
	}
	clk.Advance(time.Second)
	p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 2)}, "after-refresh")
	p.step(ctx)
	if n := counted.n.Load(); n != 2 {
		t.Errorf("%d account reads after AccountRefresh passed, want 2 (read again)", n)
	}
	if v := p.driveUntil(clk, final, job.Job.ID); v.Job.Status != store.JobCompleted {
		t.Fatalf("job %s %+v", v.Job.Status, v.Counts())
	}
}
