package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestAccountReadsKeepEveryAccount: the process keeps the read of every
// account its turns send for, not only the last one read: two jobs of two
// accounts each, within one AccountRefresh, read each account once.
func TestAccountReadsKeepEveryAccount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	p := newPipeline(t, pipelineOptions{clock: clk, sender: sender.Config{ClaimBatch: 10}, responseTimeout: 200 * time.Millisecond})
	p.account("a", 1000, 1000, 0, 1)
	p.account("b", 1000, 1000, 0, 1)
	counted := &accountGets{Store: p.store}
	p.sender.Store = counted
	first := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a", "b"}, 2)}, "two-accounts-1")
	start := clk.Now()
	p.step(ctx)
	second := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a", "b"}, 2)}, "two-accounts-2")
	turns := len(p.step(ctx))
	if turns < 2 || clk.Now().Sub(start) >= time.Second {
		t.Fatalf("%d turns of the second job after %v: want one per account within one AccountRefresh", turns, clk.Now().Sub(start))
	}
	if n := counted.n.Load(); n != 2 {
		t.Errorf("%d account reads for the turns of two jobs on two accounts within AccountRefresh, want 2 (each account once)", n)
	}
	for _, job := range []store.JobView{first, second} {
		if v := p.driveUntil(clk, final, job.Job.ID); v.Job.Status != store.JobCompleted {
			t.Fatalf("job %s %+v", v.Job.Status, v.Counts())
		}
	}
}

// TestAccountReadNotTrustedFromAClockSteppedBack: a read made at a time
// the clock has since gone back before (a wall clock stepped back) is not
// trusted for the refresh window measured backwards: the account is read
// again, so a changed rate or breaker threshold still takes effect within
// AccountRefresh.
func TestAccountReadNotTrustedFromAClockSteppedBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	p := newPipeline(t, pipelineOptions{clock: clk, sender: sender.Config{ClaimBatch: 10}, responseTimeout: 200 * time.Millisecond})
	p.account("a", 1000, 1000, 0, 1)
	counted := &accountGets{Store: p.store}
	p.sender.Store = counted
	first := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 2)}, "before-step-back")
	p.step(ctx)
	if n := counted.n.Load(); n != 1 {
		t.Fatalf("%d account reads for the first job, want 1", n)
	}
	clk.Set(t0.Add(-time.Minute))
	second := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 2)}, "after-step-back")
	p.step(ctx)
	if n := counted.n.Load(); n != 2 {
		t.Errorf("%d account reads after the clock went back a minute, want 2 (a read from the clock's future is read again)", n)
	}
	for _, job := range []store.JobView{first, second} {
		if v := p.driveUntil(clk, final, job.Job.ID); v.Job.Status != store.JobCompleted {
			t.Fatalf("job %s %+v", v.Job.Status, v.Counts())
		}
	}
}
