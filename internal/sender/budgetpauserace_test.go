package sender_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// budgetPausedByAnotherShard is a store in which, the first time a
// reservation finds the budget used up, another shard of the job has just
// paused it for budget (and published its own JobPaused): the reserving
// shard's own pause then finds the job paused already.
type budgetPausedByAnotherShard struct {
	store.Store
	clk  clock.Clock
	once sync.Once
	err  error
}

func (s *budgetPausedByAnotherShard) ReserveBudget(ctx context.Context, jobID string, n int64) (store.BudgetGrant, error) {
	g, err := s.Store.ReserveBudget(ctx, jobID, n)
	if err == nil && n > 0 && g.Granted == 0 {
		s.once.Do(func() {
			_, s.err = s.Store.TransitionJob(ctx, store.TransitionJobParams{JobID: jobID, From: []store.JobStatus{store.JobRunning},
				To: store.JobPaused, PauseReason: store.PauseBudget, At: s.clk.Now()})
		})
	}
	return g, err
}

// TestBudgetPauseMadeByAnotherShardIsNotAlertedAgain: a shard that finds
// the budget used up after another shard paused the job for it ends its
// turn with the job paused and the budget sent exactly, and publishes no
// JobPaused of its own: the operator gets one alert per pause, from the
// shard that made it.
func TestBudgetPauseMadeByAnotherShardIsNotAlertedAgain(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 2})
	p.account("a", 1000, 1000, 0, 1)
	other := &budgetPausedByAnotherShard{Store: p.sender.Store, clk: clk}
	p.sender.Store = other
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 10), Budget: 4}, "paused-by-another")
	v := p.driveUntil(clk, func(v store.JobView) bool { return v.Job.Status == store.JobPaused }, job.Job.ID)
	for range 5 { // the turns left run and end
		p.step(context.Background())
		clk.Advance(time.Second)
	}
	if other.err != nil {
		t.Fatalf("the other shard's pause: %v", other.err)
	}
	v, _ = p.store.GetJob(context.Background(), job.Job.ID)
	if v.Job.Status != store.JobPaused || v.Job.PauseReason != store.PauseBudget || len(p.deliveries()) != 4 {
		t.Fatalf("job %s (%s) with %d sent; want paused for budget with the budget of 4 sent", v.Job.Status, v.Job.PauseReason, len(p.deliveries()))
	}
	if ev := p.alerts.Of(alert.JobPaused); len(ev) != 0 {
		t.Fatalf("JobPaused alerts %+v from a shard that did not make the pause; want none", ev)
	}
}
