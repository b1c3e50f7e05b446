package sender_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// Regression tests for findings of a review of the sender, reconciler and
// submit (one per finding).

// lostAnswerProvider: calls to one recipient fail with a transport error
// and never reach the provider (sender records them uncertain; the mock
// has no record, so its status look-up says "unknown").
type lostAnswerProvider struct {
	provider.Provider
	to string
}

func (l *lostAnswerProvider) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	for _, to := range req.To {
		if to == l.to {
			return provider.SendResult{}, errors.New("connection reset after write")
		}
	}
	return l.Provider.Send(ctx, req)
}

// An item left submitted in a job that is then cancelled is
// re-pended by the reconciler ("unknown" at the provider) and stays pending
// forever in a cancelled job with a cancelled shard: nobody abandons it.
func TestCancelledJobNeverRependsAnItem(t *testing.T) {
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5})
	p.account("a", 1000, 1000, 0, 1)
	p.sender.Provider = &lostAnswerProvider{Provider: p.sender.Provider, to: "user-2"}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 10)}, "cx")
	ctx := context.Background()
	ctl := &control.Controller{Store: p.store, Queue: p.queue, Clock: clk}
	// Send a first batch (user-2 ends up submitted/uncertain), then cancel.
	p.step(ctx)
	if _, err := ctl.Cancel(ctx, job.Job.ID); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		p.step(ctx)
		clk.Advance(time.Second)
	}
	// Reconcile long after: the item is looked up and re-pended.
	for range 10 {
		clk.Advance(31 * time.Second)
		if _, err := p.reconciler.Run(ctx); err != nil {
			t.Fatal(err)
		}
		p.step(ctx)
	}
	v, _ := p.store.GetJob(ctx, job.Job.ID)
	t.Logf("job %s shards[0]=%s counts %+v", v.Job.Status, v.Shards[0].Status, v.Counts())
	for _, it := range p.items(job.Job.ID) {
		if it.Status == store.ItemPending {
			t.Errorf("item %d (%s) is pending in a %s job (shard %s): never sent, never abandoned",
				it.Seq, it.To, v.Job.Status, v.Shards[it.Shard].Status)
		}
	}
}

// Account-level refusals (42001, "nothing was sent") return items
// to pending with their attempt given back, but their budget is not given
// back: the outage eats the budget and the job pauses for budget having
// delivered nothing.
func TestAccountDownDoesNotBurnBudget(t *testing.T) {
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5, TurnDuration: 5 * time.Second})
	breakerAccount(p, "a", 5)
	if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{Down: true}); err != nil {
		t.Fatal(err)
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 10), Budget: 5}, "bd")
	ctx := context.Background()
	p.driveUntil(clk, func(v store.JobView) bool { return v.Shards[0].Status == store.ShardPaused }, job.Job.ID)
	_ = p.mock.SetBehaviour("a", mockprovider.Behaviour{})
	clk.Advance(31 * time.Second)
	v := p.driveUntil(clk, func(v store.JobView) bool { return v.Job.Status != store.JobRunning }, job.Job.ID)
	_ = ctx
	if d := len(p.deliveries()); v.Job.Status == store.JobPaused && d < 5 {
		t.Errorf("job paused for %s after delivering %d of a budget of 5 (BudgetUsed %d)", v.Job.PauseReason, d, v.Job.BudgetUsed)
	}
}

// failOnceStore fails the first release of a creating job (a crash between
// writing the snapshot and releasing the job).
type failOnceStore struct {
	store.Store
	mu     sync.Mutex
	failed bool
}

func (f *failOnceStore) TransitionJob(ctx context.Context, p store.TransitionJobParams) (store.Job, error) {
	f.mu.Lock()
	fail := !f.failed && p.To == store.JobRunning
	f.failed = f.failed || fail
	f.mu.Unlock()
	if fail {
		return store.Job{}, errors.New("crash before release")
	}
	return f.Store.TransitionJob(ctx, p)
}

// An interrupted submission retried with the same key after the
// suppression list changed writes a different plan over the first one's
// snapshot (INSERT OR REPLACE by seq): the first plan's last seq survives,
// so one recipient has two items and gets two messages.
func TestSubmitRetryAfterSuppressionChangeSendsNoDuplicate(t *testing.T) {
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5})
	p.account("a", 1000, 1000, 0, 1)
	ctx := context.Background()
	fs := &failOnceStore{Store: p.store}
	sub := &submit.Submitter{Store: fs, Queue: p.queue, Clock: clk}
	req := submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 10)}
	if _, err := sub.Submit(ctx, submit.Params{Tenant: tenant, IdempotencyKey: "dup", Request: req}); err == nil {
		t.Fatal("first submit should fail")
	}
	if err := p.store.PutSuppressions(ctx, tenant, []store.Suppression{{Account: "a", To: "user-0", CreatedAt: clk.Now()}}); err != nil {
		t.Fatal(err)
	}
	// The retry cannot complete the interrupted job as planned: refused, and
	// the half-written job fails without sending anything.
	_, err := sub.Submit(ctx, submit.Params{Tenant: tenant, IdempotencyKey: "dup", Request: req})
	if !errors.Is(err, submit.ErrIdempotencyConflict) {
		t.Fatalf("retry after the suppression list changed: %v, want an idempotency conflict", err)
	}
	jobs, _ := p.store.ListJobs(ctx, store.ListJobsParams{Tenant: tenant})
	if len(jobs.Jobs) != 1 || jobs.Jobs[0].Status != store.JobFailed {
		t.Fatalf("interrupted job: %+v", jobs.Jobs)
	}
	// A new key sends every recipient but the suppressed one, once.
	res, err := sub.Submit(ctx, submit.Params{Tenant: tenant, IdempotencyKey: "dup-2", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	v := p.driveUntil(clk, final, res.Job.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Job.Total != 9 || len(p.deliveries()) != 9 {
		t.Fatalf("%s total %d, %d delivered", v.Job.Status, v.Job.Total, len(p.deliveries()))
	}
	p.checkExactlyOnce(res.Job.Job.ID)
}

// hangProvider holds every call until released, then fails it with a
// transport error (uncertain). It counts calls started.
type hangProvider struct {
	started   atomic.Int64
	startedCh chan struct{}
	release   chan struct{}
}

func (h *hangProvider) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	h.started.Add(1)
	select {
	case h.startedCh <- struct{}{}:
	default:
	}
	if !released(h.release) {
		return provider.SendResult{}, errors.New("hangProvider: the test never released its calls")
	}
	return provider.SendResult{}, errors.New("response timeout")
}

func (h *hangProvider) Status(ctx context.Context, req provider.StatusRequest) (provider.Status, error) {
	return provider.StatusUnknown, nil
}

// With stragglers, a shard keeps claiming and sending batches
// while earlier calls have no answer, so far more items than the account's
// consecutive_failures are sent (and left uncertain) before the fast path
// can open the breaker.
func TestStragglersCountAgainstBreakerStreak(t *testing.T) {
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 10, StragglerWait: time.Second})
	breakerAccount(p, "a", 3)
	p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 100)}, "strk")
	if n := callsWithoutAnswer(t, p, clk); n > 3 {
		t.Errorf("%d calls sent with no answer before the breaker (consecutive_failures=3) could judge; want at most 3", n)
	}
}

// A half-open probe whose call straggles is repeated every
// StragglerWait: the probing shard sends probe after probe to an account
// that may still be down.
func TestProbeWaitsForItsAnswers(t *testing.T) {
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 10, StragglerWait: time.Second})
	breakerAccount(p, "a", 3)
	if _, err := p.sender.Breakers.Open(context.Background(), tenant, "a", "test"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(31 * time.Second) // cool-down over: the next gate probes
	p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 100)}, "probe")
	if n := callsWithoutAnswer(t, p, clk); n > breaker.ProbeSize {
		t.Errorf("half-open probe: %d calls sent before the probe's answer; want at most ProbeSize (%d)", n, breaker.ProbeSize)
	}
}

// callsWithoutAnswer works the pipeline's next turn against a provider that
// never answers, through many straggler waits, and returns how many calls
// the turn started before any answer came.
func callsWithoutAnswer(t *testing.T, p *pipeline, clk *clock.Fake) int64 {
	t.Helper()
	hp := &hangProvider{release: make(chan struct{}), startedCh: make(chan struct{}, 1000)}
	p.sender.Provider = hp
	msg := p.nextTurn(time.Hour)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = p.sender.HandleTurn(context.Background(), msg)
	}()
	// A call that starts is noticed at once; a bounded window after each
	// straggler wait shows that no more start.
	for range 20 {
		clk.Advance(time.Second)
		select {
		case <-hp.startedCh:
		case <-time.After(20 * time.Millisecond):
		}
	}
	n := hp.started.Load()
	close(hp.release)
	recv(t, done, "the turn after its calls were released")
	return n
}

// A budget set on a running job that had none also counts the sends made
// before it was set.
func TestBudgetSetMidRunCountsEarlierSends(t *testing.T) {
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5, TurnDuration: time.Second})
	p.account("a", 10, 10, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 40)}, "bm")
	ctx := context.Background()
	ctl := &control.Controller{Store: p.store, Queue: p.queue, Clock: clk}
	p.driveUntil(clk, func(v store.JobView) bool { return v.Counts().Confirmed >= 10 }, job.Job.ID)
	if _, err := ctl.Pause(ctx, job.Job.ID); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		p.step(ctx)
		clk.Advance(time.Second)
	}
	before := len(p.deliveries())
	b := int64(before + 2)
	if _, err := ctl.UpdateLimits(ctx, job.Job.ID, nil, &b); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Resume(ctx, job.Job.ID); err != nil {
		t.Fatal(err)
	}
	v := p.driveUntil(clk, func(v store.JobView) bool { return v.Job.Status != store.JobRunning }, job.Job.ID)
	if d := len(p.deliveries()); d > int(b) {
		t.Errorf("budget %d set after %d sends, but %d sent in all (job %s)", b, before, d, v.Job.Status)
	}
}
