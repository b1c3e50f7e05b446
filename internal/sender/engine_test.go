package sender_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// fakePipeline is the engine on a fake clock: the store, queue, mock and
// sender all read the same clock, and in-handler waits advance it.
func fakePipeline(t *testing.T, cfg sender.Config) (*pipeline, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(t0)
	p := newPipeline(t, pipelineOptions{clock: clk, sender: cfg, responseTimeout: 200 * time.Millisecond})
	return p, clk
}

// step receives every available turn message and works it once, like the
// event source would; it deletes the messages that are done.
func (p *pipeline) step(ctx context.Context) []sender.Result {
	p.t.Helper()
	// A turn that never ends (a bug that sends the same items again and
	// again within one turn, each send waiting out the provider's real
	// response timeout, while the fake clock that would end the turn
	// stands still) is cancelled after stepLimit and fails the test.
	// Cancelled, not given a deadline: a turn plans to end before its
	// context's deadline, and a wall-clock deadline must not shorten the
	// fake-clock turns.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer time.AfterFunc(stepLimit, cancel).Stop()
	msgs, err := p.queue.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: 5 * time.Minute})
	if err != nil {
		p.t.Fatal(err)
	}
	var out []sender.Result
	for _, m := range msgs {
		res, err := p.sender.HandleTurn(ctx, turnMessage(m))
		if ctx.Err() != nil {
			p.t.Fatalf("a turn did not end within %v (result %+v, err %v)", stepLimit, res, err)
		}
		if err != nil {
			p.t.Fatalf("turn: %v", err)
		}
		// Every turn ends for a reason it names (finished, handed back,
		// waiting for reconciliation, ...): one that just stops leaves its
		// shard running without a turn message, until the reconciler
		// finds it stuck.
		if res.Reason == "" {
			p.t.Fatalf("a turn ended without a reason: %+v", res)
		}
		if res.Disposition == sender.Done {
			if err := p.queue.Delete(ctx, m.ReceiptHandle); err != nil && !errors.Is(err, queue.ErrNotFound) {
				p.t.Fatal(err)
			}
		}
		out = append(out, res)
	}
	return out
}

// driveLimit bounds a driveUntil in wall-clock time: a bug that keeps a
// job from ever reaching the condition (items re-pended for ever, each
// send waiting out the provider's real response timeout) fails the test
// with what the job looked like, instead of hanging until go test's
// 10-minute timeout.
const driveLimit = time.Minute

// stepLimit bounds one step (a receive and its turns) in wall-clock time.
const stepLimit = 20 * time.Second

// driveUntil steps the fake clock forward until cond holds, at most 2000
// steps and driveLimit.
func (p *pipeline) driveUntil(clk *clock.Fake, cond func(store.JobView) bool, jobID string) store.JobView {
	p.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(driveLimit)
	for i := 0; i < 2000; i++ {
		if time.Now().After(deadline) {
			v, _ := p.store.GetJob(ctx, jobID)
			p.t.Fatalf("condition not reached in %v (%d steps): status %s counts %+v", driveLimit, i, v.Job.Status, v.Counts())
		}
		p.step(ctx)
		v, err := p.store.GetJob(ctx, jobID)
		if err != nil {
			p.t.Fatal(err)
		}
		if cond(v) {
			return v
		}
		clk.Advance(250 * time.Millisecond)
		if i%20 == 19 {
			if _, err := p.reconciler.Run(ctx); err != nil {
				p.t.Fatal(err)
			}
		}
	}
	v, _ := p.store.GetJob(ctx, jobID)
	p.t.Fatalf("condition not reached: status %s counts %+v", v.Job.Status, v.Counts())
	return v
}

func final(v store.JobView) bool { return store.JobFinal(v.Job.Status) }

// TestHandBackInsteadOfSleeping: when the next token is further away than
// MaxWait, the turn hands the shard back to the queue with that delay
// instead of waiting in the handler.
func TestHandBackInsteadOfSleeping(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 10, MaxWait: 300 * time.Millisecond})
	p.account("a", 2, 2, 0, 1) // 2/s: a token every 500 ms
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 5)}, "hb")
	ctx := context.Background()
	msg := p.nextTurn(time.Minute)
	before := clk.Now()
	res, err := p.sender.HandleTurn(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	if waited := clk.Now().Sub(before); waited > 300*time.Millisecond {
		t.Fatalf("handler waited %v in total; must hand back instead of waiting over 300ms", waited)
	}
	if res.Disposition != sender.HandedBack || res.Delay < 500*time.Millisecond {
		t.Fatalf("result %+v, want handed back with a delay of at least 500ms", res)
	}
	if res.Sent != 1 {
		t.Fatalf("sent %d before handing back, want 1 (burst)", res.Sent)
	}
	// The message is invisible until the delay passes, then comes back.
	if again, _ := p.queue.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute}); len(again) != 0 {
		t.Fatal("handed-back message visible before its delay")
	}
	clk.Advance(res.Delay)
	again, err := p.queue.Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Minute})
	if err != nil || len(again) != 1 || again[0].ID != msg.ID || again[0].ReceiveCount != 2 {
		t.Fatalf("after the delay: %v %+v", err, again)
	}
	_ = job
}

// TestBudgetPausesExactly: a job with budget B never has more than B items
// sent; reaching it pauses the job (reason budget); raising the budget and
// resuming continues with no overshoot.
func TestBudgetPausesExactly(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 20), Budget: 7}, "budget")
	v := p.driveUntil(clk, func(v store.JobView) bool { return v.Job.Status == store.JobPaused }, job.Job.ID)
	if v.Job.PauseReason != store.PauseBudget {
		t.Fatalf("paused for %q, want budget", v.Job.PauseReason)
	}
	if n := len(p.deliveries()); n != 7 {
		t.Fatalf("delivered %d, want exactly the budget of 7", n)
	}
	if ev := p.alerts.Of(alert.JobPaused); len(ev) != 1 || ev[0].Detail.(alert.JobPausedDetail).Reason != "budget" {
		t.Fatalf("JobPaused alerts %+v", ev)
	}
	// More turns do nothing while paused.
	for range 5 {
		p.step(context.Background())
		clk.Advance(time.Second)
	}
	if n := len(p.deliveries()); n != 7 {
		t.Fatalf("delivered %d while paused", n)
	}
	ctl := &control.Controller{Store: p.store, Queue: p.queue, Clock: clk}
	b := int64(12)
	if _, err := ctl.UpdateLimits(context.Background(), job.Job.ID, nil, &b); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Resume(context.Background(), job.Job.ID); err != nil {
		t.Fatal(err)
	}
	v = p.driveUntil(clk, func(v store.JobView) bool { return v.Job.Status == store.JobPaused }, job.Job.ID)
	if n := len(p.deliveries()); n != 12 {
		t.Fatalf("delivered %d after raising the budget to 12", n)
	}
	if c := v.Counts(); c.Confirmed != 12 || c.Pending != 8 {
		t.Fatalf("counts %+v", c)
	}
	p.checkExactlyOnce(job.Job.ID)
}

// TestPauseResumeCancel: pause stops at a batch boundary and is resumable;
// cancel abandons what remains, irreversibly, undoing nothing sent.
func TestPauseResumeCancel(t *testing.T) {
	t.Parallel()
	// Short turns, so operator commands land between them.
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5, TurnDuration: time.Second})
	p.account("a", 10, 10, 0, 1) // half burst 5, then 10/s
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 60)}, "prc")
	ctx := context.Background()
	ctl := &control.Controller{Store: p.store, Queue: p.queue, Clock: clk}
	p.driveUntil(clk, func(v store.JobView) bool { return v.Counts().Confirmed >= 10 }, job.Job.ID)
	if _, err := ctl.Pause(ctx, job.Job.ID); err != nil {
		t.Fatal(err)
	}
	for range 10 { // let in-flight turns notice
		p.step(ctx)
		clk.Advance(time.Second)
	}
	paused := len(p.deliveries())
	for range 20 {
		p.step(ctx)
		clk.Advance(time.Second)
	}
	if n := len(p.deliveries()); n != paused {
		t.Fatalf("sent %d more while paused", n-paused)
	}
	if _, err := ctl.Pause(ctx, job.Job.ID); !errors.Is(err, control.ErrNotAllowed) {
		t.Fatalf("pausing a paused job: %v, want ErrNotAllowed", err)
	}
	if _, err := ctl.Resume(ctx, job.Job.ID); err != nil {
		t.Fatal(err)
	}
	p.driveUntil(clk, func(v store.JobView) bool { return v.Counts().Confirmed >= int64(paused)+10 }, job.Job.ID)
	if _, err := ctl.Cancel(ctx, job.Job.ID); err != nil {
		t.Fatal(err)
	}
	v := p.driveUntil(clk, func(v store.JobView) bool {
		return v.Shards[0].Status == store.ShardCancelled
	}, job.Job.ID)
	if v.Job.Status != store.JobCancelled {
		t.Fatalf("status %s", v.Job.Status)
	}
	c := v.Counts()
	if c.Abandoned == 0 || c.Pending != 0 || c.Confirmed+c.Abandoned+c.Failed+c.Submitted != 60 {
		t.Fatalf("counts after cancel %+v", c)
	}
	if int64(len(p.deliveries())) != c.Confirmed {
		t.Fatalf("log has %d, confirmed %d", len(p.deliveries()), c.Confirmed)
	}
	if _, err := ctl.Resume(ctx, job.Job.ID); !errors.Is(err, control.ErrNotAllowed) {
		t.Fatalf("resuming a cancelled job: %v, want ErrNotAllowed", err)
	}
	p.checkExactlyOnce(job.Job.ID)
}

// TestErrorCategories: rate limits return items to pending without using an
// attempt and slow the shard; retryable errors back off then exhaust;
// permanent errors never retry; lost answers stay submitted until the
// reconciler's status look-up settles them.
func TestErrorCategories(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		behaviour mockprovider.Behaviour
		check     func(t *testing.T, p *pipeline, v store.JobView, items []store.Item)
	}{
		{"permanent", mockprovider.Behaviour{Errors: []mockprovider.InjectedError{{Errcode: 81013, Ratio: 1}}},
			func(t *testing.T, p *pipeline, v store.JobView, items []store.Item) {
				for _, it := range items {
					if it.Status != store.ItemFailed || it.Error == nil || it.Error.Category != store.CategoryPermanent || it.Attempts != 1 {
						t.Fatalf("item %+v, want failed permanent after 1 attempt", it)
					}
				}
				if v.Job.Status != store.JobFailed || v.Failures()[store.CategoryPermanent] != 6 {
					t.Fatalf("job %s failures %v", v.Job.Status, v.Failures())
				}
				fin, dead := p.alerts.Of(alert.JobFinished), p.alerts.Of(alert.DeadLetters)
				if len(fin) != 1 || fin[0].Detail.(alert.JobFinishedDetail).Status != "failed" ||
					len(dead) != 1 || dead[0].Detail.(alert.DeadLettersDetail).Failures[store.CategoryPermanent] != 6 {
					t.Fatalf("alerts: finished %+v dead letters %+v", fin, dead)
				}
				if st := p.alerts.Of(alert.JobStarted); len(st) != 1 || st[0].Tenant != tenant {
					t.Fatalf("JobStarted alerts %+v", st)
				}
			}},
		{"retryable then exhausted", mockprovider.Behaviour{Errors: []mockprovider.InjectedError{{Errcode: -1, Ratio: 1}}},
			func(t *testing.T, p *pipeline, v store.JobView, items []store.Item) {
				for _, it := range items {
					if it.Status != store.ItemFailed || it.Error.Category != store.CategoryExhausted || it.Attempts != 3 {
						t.Fatalf("item %+v, want exhausted after 3 attempts", it)
					}
				}
				if s := p.mock.Stats()["a"]; s.Calls != 18 {
					t.Fatalf("mock saw %d calls, want 6 items × 3 attempts", s.Calls)
				}
			}},
		{"uncertain settled by look-up", mockprovider.Behaviour{TimeoutRatio: 1},
			func(t *testing.T, p *pipeline, v store.JobView, items []store.Item) {
				if v.Job.Status != store.JobCompleted {
					t.Fatalf("status %s counts %+v", v.Job.Status, v.Counts())
				}
				if s := p.mock.Stats()["a"]; s.Calls != 6 {
					t.Fatalf("mock saw %d calls: an uncertain item was resent blindly", s.Calls)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, clk := fakePipeline(t, sender.Config{ClaimBatch: 3, MaxAttempts: 3, BackoffBase: time.Second, BackoffCap: 4 * time.Second})
			p.account("a", 1000, 1000, 0, 1)
			if err := p.mock.SetBehaviour("a", tc.behaviour); err != nil {
				t.Fatal(err)
			}
			job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 6)}, tc.name)
			v := p.driveUntil(clk, final, job.Job.ID)
			tc.check(t, p, v, p.items(job.Job.ID))
			p.checkExactlyOnce(job.Job.ID)
		})
	}
}

// TestRateLimitedReturnsToPendingAndSlowsDown: a 45009 answer uses no
// attempt, returns the item to pending, and slows the shard.
func TestRateLimitedReturnsToPendingAndSlowsDown(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5})
	p.account("a", 100, 100, 0, 1)
	if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{Errors: []mockprovider.InjectedError{{Errcode: 45009, Ratio: 1}}}); err != nil {
		t.Fatal(err)
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 5)}, "rl")
	ctx := context.Background()
	p.step(ctx)
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sf := v.Shards[0].SlowFactor; sf >= 1 || sf <= 0 {
		t.Fatalf("slow factor %v after rate limiting, want in (0,1)", sf)
	}
	for _, it := range p.items(job.Job.ID) {
		if it.Status != store.ItemPending || it.Attempts != 0 {
			t.Fatalf("item %+v, want pending with no attempt used", it)
		}
	}
	_ = p.mock.SetBehaviour("a", mockprovider.Behaviour{})
	v = p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted {
		t.Fatalf("status %s", v.Job.Status)
	}
	p.checkExactlyOnce(job.Job.ID)
}

// TestReconcilerRedrivesALostShard: a shard whose turn message is lost
// makes no progress; after StaleAfter the reconciler re-drives it and the
// job completes, every recipient once.
func TestReconcilerRedrivesALostShard(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 12)}, "lost")
	ctx := context.Background()
	msgs, err := p.queue.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Minute})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v %d", err, len(msgs))
	}
	if err := p.queue.Delete(ctx, msgs[0].ReceiptHandle); err != nil { // the message is lost
		t.Fatal(err)
	}
	rep, err := p.reconciler.Run(ctx)
	if err != nil || rep.Redriven != 0 {
		t.Fatalf("fresh shard re-driven too early: %+v %v", rep, err)
	}
	clk.Advance(31 * time.Second) // past StaleAfter (30 s in the pipeline)
	rep, err = p.reconciler.Run(ctx)
	if err != nil || rep.Redriven != 1 {
		t.Fatalf("reconcile: %+v %v", rep, err)
	}
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted {
		t.Fatalf("status %s", v.Job.Status)
	}
	p.checkExactlyOnce(job.Job.ID)
}

// TestRedriveExhaustedAfterHeal: items that exhausted their retries while
// the provider was failing are redriven once it heals, each delivered once.
func TestRedriveExhaustedAfterHeal(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4, MaxAttempts: 2, BackoffBase: time.Second, BackoffCap: 2 * time.Second})
	p.account("a", 1000, 1000, 0, 1)
	if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{Errors: []mockprovider.InjectedError{{Errcode: -1, Ratio: 1}}}); err != nil {
		t.Fatal(err)
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 9)}, "redrive")
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobFailed || v.Failures()[store.CategoryExhausted] != 9 {
		t.Fatalf("status %s failures %v", v.Job.Status, v.Failures())
	}
	ctl := &control.Controller{Store: p.store, Queue: p.queue, Clock: clk}
	ctx := context.Background()
	if _, err := ctl.Redrive(ctx, job.Job.ID, store.CategoryCancelled); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("redrive of cancelled items: %v", err)
	}
	_ = p.mock.SetBehaviour("a", mockprovider.Behaviour{})
	n, err := ctl.Redrive(ctx, job.Job.ID, store.CategoryExhausted)
	if err != nil || n != 9 {
		t.Fatalf("redrive: %d %v", n, err)
	}
	v = p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted || len(v.Failures()) != 0 {
		t.Fatalf("after redrive: %s %+v %v", v.Job.Status, v.Counts(), v.Failures())
	}
	p.checkExactlyOnce(job.Job.ID)
	if n, err := ctl.Redrive(ctx, job.Job.ID, store.CategoryExhausted); err != nil || n != 0 {
		t.Fatalf("second redrive: %d %v", n, err)
	}
}

// TestResolveItemUnderReview: an item sent without an answer can be settled
// by an operator; other items cannot be "resolved".
func TestResolveItemUnderReview(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	p.account("a", 1000, 1000, 0, 1)
	_ = p.mock.SetBehaviour("a", mockprovider.Behaviour{TimeoutRatio: 1})
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "resolve")
	ctx := context.Background()
	p.step(ctx)
	ctl := &control.Controller{Store: p.store, Queue: p.queue, Clock: clk}
	items := p.items(job.Job.ID)
	for _, it := range items {
		if it.Status != store.ItemSubmitted || it.Error == nil || it.Error.Category != store.CategoryUncertain {
			t.Fatalf("item %+v, want submitted/uncertain", it)
		}
		if _, err := ctl.Resolve(ctx, job.Job.ID, it.Seq, control.Delivered); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ctl.Resolve(ctx, job.Job.ID, items[0].Seq, control.Resend); !errors.Is(err, control.ErrNotUnderReview) {
		t.Fatalf("resolving a confirmed item: %v", err)
	}
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 3 {
		t.Fatalf("%s %+v", v.Job.Status, v.Counts())
	}
	p.checkExactlyOnce(job.Job.ID)
}

// TestSuppressedAfterSubmitIsAbandoned: a recipient added to the
// suppression list after the job was submitted is abandoned at send time
// with category suppressed, never sent.
func TestSuppressedAfterSubmitIsAbandoned(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 3})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 6)}, "supp")
	if err := p.store.PutSuppressions(context.Background(), tenant, []store.Suppression{{Account: "a", To: "user-4", Reason: "unsubscribed"}}); err != nil {
		t.Fatal(err)
	}
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobPartial || v.Counts().Abandoned != 1 || v.Failures()[store.CategorySuppressed] != 1 {
		t.Fatalf("%s %+v %v", v.Job.Status, v.Counts(), v.Failures())
	}
	for _, ds := range p.deliveries() {
		if ds[0].ToID == "user-4" {
			t.Fatal("suppressed recipient was sent")
		}
	}
	p.checkExactlyOnce(job.Job.ID)
}

// suppLookups counts the sender's suppression look-ups.
type suppLookups struct {
	store.Store
	calls atomic.Int64
}

// SuppressionsChangedAt is the newest entry's time (the SQLite store
// answers the end of time for any list, and so looks up every batch).
func (s *suppLookups) SuppressionsChangedAt(ctx context.Context, tenant string) (time.Time, error) {
	var newest time.Time
	p := store.ListSuppressionsParams{Tenant: tenant, Limit: 1000}
	for {
		page, err := s.Store.ListSuppressions(ctx, p)
		if err != nil {
			return time.Time{}, err
		}
		for _, e := range page.Entries {
			if e.CreatedAt.After(newest) {
				newest = e.CreatedAt
			}
		}
		if page.NextCursor == "" {
			return newest, nil
		}
		p.Cursor = page.NextCursor
	}
}

func (s *suppLookups) SuppressedAmong(ctx context.Context, tenant string, keys []store.RecipientKey) (map[store.RecipientKey]bool, error) {
	s.calls.Add(1)
	return s.Store.SuppressedAmong(ctx, tenant, keys)
}

// TestSuppressionLookupsOnlyAfterAChange: a job created well after the
// tenant's suppression list last changed was planned against the whole
// list, so its batches are not looked up again (half a read unit per
// recipient on DynamoDB); an entry added after a job's creation is looked
// up and honoured at send time.
func TestSuppressionLookupsOnlyAfterAChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 3})
	p.account("a", 1000, 1000, 0, 1)
	if err := p.store.PutSuppressions(ctx, tenant, []store.Suppression{{Account: "a", To: "user-1", CreatedAt: clk.Now()}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour)
	counted := &suppLookups{Store: p.store}
	p.sender.Store = counted
	old := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 6)}, "old-list")
	v := p.driveUntil(clk, final, old.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 5 || v.Job.Suppressed != 1 {
		t.Fatalf("%s %+v, %d suppressed at submit", v.Job.Status, v.Counts(), v.Job.Suppressed)
	}
	if n := counted.calls.Load(); n != 0 {
		t.Errorf("%d look-ups for a job created 2 h after the list's last change", n)
	}

	fresh := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 6)}, "fresh-entry")
	clk.Advance(time.Second)
	if err := p.store.PutSuppressions(ctx, tenant, []store.Suppression{{Account: "a", To: "user-3", CreatedAt: clk.Now()}}); err != nil {
		t.Fatal(err)
	}
	v = p.driveUntil(clk, final, fresh.Job.ID)
	if v.Counts().Abandoned != 1 || v.Failures()[store.CategorySuppressed] != 1 || v.Counts().Confirmed != 4 {
		t.Fatalf("%s %+v %v", v.Job.Status, v.Counts(), v.Failures())
	}
	if counted.calls.Load() == 0 {
		t.Error("no look-up for a job whose tenant added an entry after its creation")
	}
	sent := map[string]int{}
	for _, ds := range p.deliveries() {
		sent[ds[0].ToID] += len(ds)
	}
	if sent["user-1"] != 0 || sent["user-3"] != 1 || sent["user-2"] != 2 {
		t.Errorf("deliveries per recipient %v: user-1 never, user-3 once (the first job), user-2 twice", sent)
	}
}

// TestLiveRateChange: lowering a job's rate cap while it runs applies at
// the next batch: the provider sees the new rate from then on.
func TestLiveRateChange(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5, TurnDuration: time.Second})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 200), RatePerSec: 20}, "live")
	p.driveUntil(clk, func(v store.JobView) bool { return v.Counts().Confirmed >= 60 }, job.Job.ID)
	ctl := &control.Controller{Store: p.store, Queue: p.queue, Clock: clk}
	slower := 4.0
	if _, err := ctl.UpdateLimits(context.Background(), job.Job.ID, &slower, nil); err != nil {
		t.Fatal(err)
	}
	changed := clk.Now()
	p.driveUntil(clk, func(v store.JobView) bool { return v.Counts().Confirmed >= 120 }, job.Job.ID)
	var after []time.Time
	for _, ds := range p.deliveries() {
		if ts := ds[0].TS; ts.After(changed.Add(time.Second)) {
			after = append(after, ts)
		}
	}
	if len(after) < 20 {
		t.Fatalf("only %d deliveries after the change", len(after))
	}
	first, last := after[0], after[0]
	for _, ts := range after {
		if ts.Before(first) {
			first = ts
		}
		if ts.After(last) {
			last = ts
		}
	}
	// At most the job bucket's burst (2) plus 4/s over the span.
	if span := last.Sub(first).Seconds(); float64(len(after)) > 2+4*span+1 {
		t.Fatalf("%d deliveries in %.1fs after lowering the cap to 4/s", len(after), span)
	}
}

// TestReconcileAfterCrashKeepsCountsTrue: a sender dies after sending a
// batch but before recording it; the reconciler settles those items before
// any new turn. The shard's counts never saw the claim, so the settlement
// must recount instead of adding a delta (counts never go negative).
func TestReconcileAfterCrashKeepsCountsTrue(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 10)}, "crash")
	ctx := context.Background()
	msg := p.nextTurn(time.Hour)
	cs := &crashingStore{Store: p.store}
	cs.left.Store(2) // take tokens, claim; then the process "dies" at UpdateItems
	s2 := *p.sender
	s2.Store = cs
	if _, err := s2.HandleTurn(ctx, msg); err == nil {
		t.Fatal("the crashing turn succeeded")
	}
	if n := len(p.deliveries()); n != 5 {
		t.Fatalf("%d delivered before the crash, want the batch of 5", n)
	}
	clk.Advance(31 * time.Second) // past SettleAfter
	rep, err := p.reconciler.Run(ctx)
	if err != nil || rep.Confirmed != 5 {
		t.Fatalf("reconcile: %+v %v", rep, err)
	}
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c := v.Counts(); c != (store.Counts{Pending: 5, Confirmed: 5}) {
		t.Fatalf("counts after settling a crashed batch: %+v, want 5 pending and 5 confirmed", c)
	}
}

// TestBudgetEqualToTotalCompletes: a budget that runs out exactly on the
// last item lets the job complete instead of pausing it forever.
func TestBudgetEqualToTotalCompletes(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 12), Budget: 12}, "exact")
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 12 {
		t.Fatalf("%s %+v (pause reason %q)", v.Job.Status, v.Counts(), v.Job.PauseReason)
	}
	p.checkExactlyOnce(job.Job.ID)
}

// holdingProvider holds the calls to one recipient until released, and
// signals every other call's answer.
type holdingProvider struct {
	provider.Provider
	to       string
	held     chan struct{} // closed when the held call started
	release  chan struct{}
	answered chan struct{} // one per answered call but the held one
	heldOnce sync.Once
}

func (h *holdingProvider) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	for _, to := range req.To {
		if to == h.to {
			h.heldOnce.Do(func() { close(h.held) })
			if !released(h.release) {
				return provider.SendResult{}, errors.New("holdingProvider: the test never released the held call")
			}
			return h.Provider.Send(ctx, req)
		}
	}
	defer func() { h.answered <- struct{}{} }()
	return h.Provider.Send(ctx, req)
}

// within fails the test if ch does not deliver n times in 10 s.
func within(t *testing.T, ch <-chan struct{}, n int, what string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for i := range n {
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("%s: only %d of %d", what, i, n)
		}
	}
}

// TestSlowCallDoesNotStallTheShard: a call that hangs does not hold up its
// shard: after StragglerWait the rest of its batch is recorded and the turn
// goes on; the hanging call's item stays submitted until it answers, and
// is recorded before the turn ends — every recipient exactly once.
func TestSlowCallDoesNotStallTheShard(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5, StragglerWait: time.Second})
	p.account("a", 1000, 1000, 0, 1)
	hp := &holdingProvider{Provider: p.sender.Provider, to: "user-2", held: make(chan struct{}), release: make(chan struct{}),
		answered: make(chan struct{}, 100)}
	p.sender.Provider = hp
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 20)}, "slow")
	ctx := context.Background()
	msg := p.nextTurn(time.Hour)
	type turnResult struct {
		res sender.Result
		err error
	}
	out := make(chan turnResult, 1)
	go func() {
		res, err := p.sender.HandleTurn(ctx, msg)
		out <- turnResult{res, err}
	}()
	recv(t, hp.held, "the held call")
	within(t, hp.answered, 4, "the batch's other calls") // then pass the straggler wait
	clk.Advance(time.Second)
	// The turn goes on without the held call: the other 15 are sent too.
	within(t, hp.answered, 15, "the next batches while one call hangs")
	select {
	case r := <-out:
		t.Fatalf("the turn ended (%+v) before its held call answered", r)
	default:
	}
	close(hp.release)
	r := recv(t, out, "the turn after its held call answered")
	if r.err != nil || r.res.Disposition != sender.Done {
		t.Fatalf("turn: %+v %v", r.res, r.err)
	}
	v, _ := p.store.GetJob(ctx, job.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 20 {
		t.Fatalf("%s %+v", v.Job.Status, v.Counts())
	}
	p.checkExactlyOnce(job.Job.ID)
}

// onCall runs a hook before the n-th provider call, inside a running turn.
type onCall struct {
	provider.Provider
	mu   sync.Mutex
	n    int
	at   int
	hook func()
}

func (o *onCall) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	o.mu.Lock()
	o.n++
	if o.n == o.at {
		o.hook()
	}
	o.mu.Unlock()
	return o.Provider.Send(ctx, req)
}

// TestLiveAccountRateChange: lowering an account's rate while a turn runs
// applies within a second (AccountRefresh), without waiting for the turn
// to end: the provider sees the new rate from then on.
func TestLiveAccountRateChange(t *testing.T) {
	t.Parallel()
	// One long turn: only the in-turn refresh can apply the change.
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5, TurnDuration: time.Hour})
	p.account("a", 20, 4, 0, 1)
	var changed time.Time
	p.sender.Provider = &onCall{Provider: p.sender.Provider, at: 40, hook: func() {
		p.account("a", 4, 4, 0, 1)
		changed = clk.Now()
	}}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 80)}, "acct-live")
	p.driveUntil(clk, final, job.Job.ID)
	var after []time.Time
	for _, ds := range p.deliveries() {
		if ts := ds[0].TS; ts.After(changed.Add(time.Second)) {
			after = append(after, ts)
		}
	}
	slices.SortFunc(after, func(a, b time.Time) int { return a.Compare(b) })
	if len(after) < 20 {
		t.Fatalf("only %d deliveries after the change", len(after))
	}
	// At most the bucket's half burst (2) plus 4/s over the span.
	if span := after[len(after)-1].Sub(after[0]).Seconds(); float64(len(after)) > 2+4*span+1 {
		t.Fatalf("%d deliveries in %.1fs after lowering the account to 4/s", len(after), span)
	}
}

// TestConfirmedItemsKeepProviderMsgID: the provider's message id of an
// accepted send is recorded on the item, with the times it was claimed and
// confirmed, for single- and multi-recipient calls alike.
func TestConfirmedItemsKeepProviderMsgID(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5})
	p.account("one", 100, 100, 0, 1)
	p.account("many", 100, 100, 0, 4)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"one", "many"}, 6)}, "msgid")
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Counts().Confirmed != 12 {
		t.Fatalf("counts %+v, want 12 confirmed", v.Counts())
	}
	seen := map[string]int64{}
	for _, it := range p.items(job.Job.ID) {
		if it.MsgID == "" || it.SubmittedAt.IsZero() || it.FinishedAt.Before(it.SubmittedAt) {
			t.Errorf("item %d (%s): MsgID %q SubmittedAt %v FinishedAt %v", it.Seq, it.Account, it.MsgID, it.SubmittedAt, it.FinishedAt)
		}
		if other, dup := seen[it.MsgID]; dup && it.Account == "one" {
			t.Errorf("items %d and %d share message id %q", other, it.Seq, it.MsgID)
		}
		seen[it.MsgID] = it.Seq
	}
}
