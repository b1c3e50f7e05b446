package sender_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// drainTurns receives and deletes every turn message waiting in the queue
// and returns how many there were for each shard.
func drainTurns(t *testing.T, q queue.Queue) map[int]int {
	t.Helper()
	ctx := context.Background()
	shards := map[int]int{}
	for {
		msgs, err := q.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return shards
		}
		for _, m := range msgs {
			tn, err := dispatch.Decode(m.Body)
			if err != nil {
				t.Fatal(err)
			}
			shards[tn.Shard]++
			if err := q.Delete(ctx, m.ReceiptHandle); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestGiveBackResumesABudgetPauseOnlyWhenItMakesRoom: a job paused because
// its budget was used up resumes, on every unfinished shard, when sends
// that never happened give budget back (the reconciler's re-pends); but a
// give-back never resumes a job whose budget the operator raised while it
// was paused (resume is the operator's confirmation) nor one the operator
// paused, and a pause with the budget still used up is never lifted.
func TestGiveBackResumesABudgetPauseOnlyWhenItMakesRoom(t *testing.T) {
	const budget = 4
	pausedForBudget := func(t *testing.T) (*pipeline, store.JobView, *control.Controller) {
		p, clk := fakePipeline(t, sender.Config{ClaimBatch: 2})
		p.account("a", 1000, 1000, 0, 1)
		p.account("b", 1000, 1000, 0, 1)
		job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: append(recipients([]string{"a"}, 10), recipients([]string{"b"}, 10)...), Budget: budget}, "giveback")
		v := p.driveUntil(clk, func(v store.JobView) bool { return v.Job.Status == store.JobPaused }, job.Job.ID)
		if v.Job.PauseReason != store.PauseBudget || v.Job.BudgetUsed != budget || len(v.Shards) != 2 {
			t.Fatalf("job paused for %q with %d of %d used, %d shards; want budget, all used, 2 shards",
				v.Job.PauseReason, v.Job.BudgetUsed, v.Job.Budget, len(v.Shards))
		}
		drainTurns(t, p.queue)
		return p, v, &control.Controller{Store: p.store, Queue: p.queue, Clock: clk}
	}
	ctx := context.Background()

	t.Run("room made", func(t *testing.T) {
		t.Parallel()
		p, v, _ := pausedForBudget(t)
		if err := sender.GiveBackBudget(ctx, p.store, p.queue, v.Job.ID, 2, t0); err != nil {
			t.Fatal(err)
		}
		got, _ := p.store.GetJob(ctx, v.Job.ID)
		if got.Job.Status != store.JobRunning || got.Job.BudgetUsed != budget-2 {
			t.Fatalf("after giving back 2 of a used-up budget: %s, %d used; want running, %d used", got.Job.Status, got.Job.BudgetUsed, budget-2)
		}
		if turns := drainTurns(t, p.queue); turns[0] != 1 || turns[1] != 1 || len(turns) != 2 {
			t.Fatalf("turns enqueued per shard %v, want one for each of shards 0 and 1", turns)
		}
	})

	t.Run("room made, the caller's shard goes on", func(t *testing.T) {
		t.Parallel()
		p, v, _ := pausedForBudget(t)
		if _, err := p.store.ReserveBudget(ctx, v.Job.ID, -2); err != nil {
			t.Fatal(err)
		}
		lifted, err := sender.LiftBudgetPause(ctx, p.store, p.queue, v.Job.ID, 0, t0)
		if err != nil || !lifted {
			t.Fatalf("lifting a budget pause with room: lifted %v, %v", lifted, err)
		}
		if turns := drainTurns(t, p.queue); turns[1] != 1 || len(turns) != 1 {
			t.Fatalf("turns enqueued per shard %v, want one for shard 1 only (shard 0's turn goes on)", turns)
		}
	})

	t.Run("no room", func(t *testing.T) {
		t.Parallel()
		p, v, _ := pausedForBudget(t)
		lifted, err := sender.LiftBudgetPause(ctx, p.store, p.queue, v.Job.ID, -1, t0)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := p.store.GetJob(ctx, v.Job.ID)
		if lifted || got.Job.Status != store.JobPaused || got.Job.PauseReason != store.PauseBudget {
			t.Fatalf("lifting a pause with the budget used up: lifted %v, job %s (%s); want still paused for budget", lifted, got.Job.Status, got.Job.PauseReason)
		}
		if turns := drainTurns(t, p.queue); len(turns) != 0 {
			t.Fatalf("turns enqueued %v for a job with its budget used up", turns)
		}
	})

	t.Run("operator raised the budget", func(t *testing.T) {
		t.Parallel()
		p, v, ctl := pausedForBudget(t)
		raised := int64(budget + 4)
		if _, err := ctl.UpdateLimits(ctx, v.Job.ID, nil, &raised); err != nil {
			t.Fatal(err)
		}
		if err := sender.GiveBackBudget(ctx, p.store, p.queue, v.Job.ID, 1, t0); err != nil {
			t.Fatal(err)
		}
		got, _ := p.store.GetJob(ctx, v.Job.ID)
		if got.Job.Status != store.JobPaused || got.Job.PauseReason != store.PauseBudget || got.Job.BudgetUsed != budget-1 {
			t.Fatalf("after a give-back with the budget raised while paused: %s (%s), %d used; want still paused for budget, %d used",
				got.Job.Status, got.Job.PauseReason, got.Job.BudgetUsed, budget-1)
		}
		if turns := drainTurns(t, p.queue); len(turns) != 0 {
			t.Fatalf("turns enqueued %v for a job that stays paused", turns)
		}
	})

	t.Run("paused by the operator", func(t *testing.T) {
		t.Parallel()
		p, v, ctl := pausedForBudget(t)
		if _, err := ctl.Resume(ctx, v.Job.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := ctl.Pause(ctx, v.Job.ID); err != nil {
			t.Fatal(err)
		}
		drainTurns(t, p.queue)
		if err := sender.GiveBackBudget(ctx, p.store, p.queue, v.Job.ID, 2, t0); err != nil {
			t.Fatal(err)
		}
		got, _ := p.store.GetJob(ctx, v.Job.ID)
		if got.Job.Status != store.JobPaused || got.Job.PauseReason == store.PauseBudget {
			t.Fatalf("a job the operator paused is %s (%s) after a give-back; want still paused by the operator", got.Job.Status, got.Job.PauseReason)
		}
		if turns := drainTurns(t, p.queue); len(turns) != 0 {
			t.Fatalf("turns enqueued %v for a job the operator paused", turns)
		}
	})
}

// reserveLog records every budget reservation (positive) and give-back
// (negative).
type reserveLog struct {
	store.Store
	mu    sync.Mutex
	asked []int64
}

func (r *reserveLog) ReserveBudget(ctx context.Context, jobID string, n int64) (store.BudgetGrant, error) {
	r.mu.Lock()
	r.asked = append(r.asked, n)
	r.mu.Unlock()
	return r.Store.ReserveBudget(ctx, jobID, n)
}

// TestBudgetReservedNeverExceedsPending: a shard reserves budget for no
// more sends than it has items pending, so that other shards never find
// the budget used up by units this shard cannot send: 13 items sent in
// batches of 10 reserve 10 and then 3, never 10 and 10 with 7 given back.
func TestBudgetReservedNeverExceedsPending(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 10, Concurrency: 10})
	p.account("a", 1000, 1000, 0, 1)
	log := &reserveLog{Store: p.sender.Store}
	p.sender.Store = log
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 13), Budget: 100}, "clamp")
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Job.BudgetUsed != 13 {
		t.Fatalf("job %s with %d of its budget used, want completed with 13", v.Job.Status, v.Job.BudgetUsed)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	var reserved int64
	for _, n := range log.asked {
		if n < 0 {
			t.Errorf("reservations and give-backs %v: %d units given back unused", log.asked, -n)
		}
		reserved += n
	}
	if reserved != 13 {
		t.Errorf("reservations %v: %d units for 13 items", log.asked, reserved)
	}
}

// TestNoBudgetNeverCountedNorPaused: a job without a budget sends all its
// items, some answered "rate limited" first (never sent, sent again
// later), without pausing for budget and without counting any budget
// usage — which would be counted against a budget set later.
func TestNoBudgetNeverCountedNorPaused(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	p.account("a", 1000, 1000, 0, 1)
	gate := &gateProvider{Provider: p.sender.Provider, account: "a", entered: make(chan struct{}), release: make(chan struct{})}
	close(gate.release) // the first call is answered "rate limited" at once
	p.sender.Provider = gate
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 10)}, "nobudget")
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 10 {
		t.Fatalf("job %s, counts %+v; want completed with 10 confirmed", v.Job.Status, v.Counts())
	}
	if v.Job.BudgetUsed != 0 {
		t.Fatalf("a job without budget has %d budget used, want 0", v.Job.BudgetUsed)
	}
	if ev := p.alerts.Of(alert.JobPaused); len(ev) != 0 {
		t.Fatalf("JobPaused alerts %+v for a job without budget", ev)
	}
	p.checkExactlyOnce(job.Job.ID)
}

// afterBudgetPause runs f once, right after a sender's budget pause is
// written.
type afterBudgetPause struct {
	store.Store
	once sync.Once
	f    func()
}

func (a *afterBudgetPause) TransitionJob(ctx context.Context, p store.TransitionJobParams) (store.Job, error) {
	j, err := a.Store.TransitionJob(ctx, p)
	if err == nil && p.To == store.JobPaused && p.PauseReason == store.PauseBudget {
		a.once.Do(a.f)
	}
	return j, err
}

// TestBudgetPauseOvertakenByTheOperator: when the operator resumes and
// pauses the job between a shard's budget pause and its look at the
// result, the job stays paused as the operator left it and no "paused for
// budget" alert is published for it.
func TestBudgetPauseOvertakenByTheOperator(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 2})
	p.account("a", 1000, 1000, 0, 1)
	ctx := context.Background()
	ctl := &control.Controller{Store: p.store, Queue: p.queue, Clock: clk}
	var jobID string
	p.sender.Store = &afterBudgetPause{Store: p.sender.Store, f: func() {
		if _, err := ctl.Resume(ctx, jobID); err != nil {
			t.Error(err)
		}
		if _, err := ctl.Pause(ctx, jobID); err != nil {
			t.Error(err)
		}
	}}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 10), Budget: 4}, "overtaken")
	jobID = job.Job.ID
	p.driveUntil(clk, func(v store.JobView) bool {
		return v.Job.Status == store.JobPaused && v.Job.PauseReason != store.PauseBudget
	}, jobID)
	for range 5 {
		p.step(ctx)
		clk.Advance(time.Second)
	}
	v, _ := p.store.GetJob(ctx, jobID)
	if v.Job.Status != store.JobPaused || v.Job.PauseReason == store.PauseBudget || len(p.deliveries()) != 4 {
		t.Fatalf("job %s (%s) with %d sent; want paused by the operator with the budget of 4 sent", v.Job.Status, v.Job.PauseReason, len(p.deliveries()))
	}
	for _, e := range p.alerts.Of(alert.JobPaused) {
		if d := e.Detail.(alert.JobPausedDetail); d.Reason == string(store.PauseBudget) {
			t.Errorf("a \"paused for budget\" alert for a job the operator paused: %+v", d)
		}
	}
}
