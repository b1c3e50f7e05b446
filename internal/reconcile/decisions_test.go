package reconcile_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/dispatch/dispatchtest"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
)

// answers is a provider whose look-ups answer what answer says for each
// item (seq); before, when set, runs inside every look-up.
type answers struct {
	mu     sync.Mutex
	answer func(seq int64) (provider.Status, error)
	asked  map[int64]int
	before func(seq int64)
	jobID  string
}

func (p *answers) Send(context.Context, provider.SendRequest) (provider.SendResult, error) {
	return provider.SendResult{}, errors.New("not used")
}

func (p *answers) Status(_ context.Context, req provider.StatusRequest) (provider.Status, error) {
	var seq int64 = -1
	for s := int64(1); s <= 100000; s++ {
		if sender.MessageKey(p.jobID, s) == req.Key {
			seq = s
			break
		}
	}
	p.mu.Lock()
	p.asked[seq]++
	before := p.before
	p.mu.Unlock()
	if before != nil {
		before(seq)
	}
	return p.answer(seq)
}

func (p *answers) times(seq int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked[seq]
}

func (f *fixture) answering(id string, answer func(seq int64) (provider.Status, error)) (*answers, *dispatchtest.Turns) {
	p := &answers{answer: answer, asked: map[int64]int{}, jobID: id}
	q := &dispatchtest.Turns{Queue: f.rec.Queue}
	f.rec.Provider, f.rec.Queue = p, q
	return p, q
}

func (f *fixture) items(t *testing.T, id string) map[int64]store.Item {
	t.Helper()
	page, err := f.store.ListItems(context.Background(), store.ListItemsParams{JobID: id, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]store.Item{}
	for _, it := range page.Items {
		out[it.Seq] = it
	}
	return out
}

// TestSettleDecisions: each answer of a look-up decides one thing:
// delivered → confirmed; no record → pending, to be sent again (abandoned
// if the job was cancelled); no look-up → left submitted under review and
// alerted; a failed look-up → left exactly as it was, to ask again next
// pass (a failure is not "no record": the message may have arrived).
func TestSettleDecisions(t *testing.T) {
	t.Parallel()
	lookupDown := errors.New("status endpoint down")
	for _, tt := range []struct {
		name       string
		answer     provider.Status
		err        error
		cancelled  bool
		want       store.ItemStatus
		category   string
		report     func(reconcile.Report) int
		alertCount int
	}{
		{"delivered", provider.StatusDelivered, nil, false, store.ItemConfirmed, "", func(r reconcile.Report) int { return r.Confirmed }, 0},
		{"no record", provider.StatusUnknown, nil, false, store.ItemPending, store.CategoryRetryable, func(r reconcile.Report) int { return r.Repended }, 0},
		{"no record, job cancelled", provider.StatusUnknown, nil, true, store.ItemAbandoned, store.CategoryCancelled, func(r reconcile.Report) int { return r.Repended }, 0},
		{"delivered, job cancelled", provider.StatusDelivered, nil, true, store.ItemConfirmed, "", func(r reconcile.Report) int { return r.Confirmed }, 0},
		{"no status look-up", "", provider.ErrStatusUnsupported, false, store.ItemSubmitted, store.CategoryUncertain, func(r reconcile.Report) int { return r.UnderReview }, 2},
		{"look-up failed", "", lookupDown, false, store.ItemSubmitted, "", func(r reconcile.Report) int { return r.LookupFailed }, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx := context.Background()
			id := f.job(t, 1, 3, 2, 0)
			if tt.cancelled {
				if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobCancelled, At: f.clk.Now()}); err != nil {
					t.Fatal(err)
				}
			}
			p, q := f.answering(id, func(int64) (provider.Status, error) { return tt.answer, tt.err })
			f.clk.Advance(2 * time.Minute)
			rep, err := f.rec.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n := tt.report(rep); n != 2 {
				t.Fatalf("report %+v: the decision counted %d, want 2", rep, n)
			}
			if total := rep.Confirmed + rep.Repended + rep.UnderReview + rep.LookupFailed; total != 2 {
				t.Fatalf("report %+v counts %d decisions, want 2", rep, total)
			}
			// Items left submitted are as old as their send.
			var oldest time.Duration
			if tt.want == store.ItemSubmitted {
				oldest = 2 * time.Minute
			}
			if rep.OldestSubmitted != oldest {
				t.Fatalf("oldest submitted %v, want %v", rep.OldestSubmitted, oldest)
			}
			for seq, it := range f.items(t, id) {
				if seq == 3 {
					if it.Status != store.ItemPending || p.times(3) != 0 {
						t.Fatalf("unclaimed item %+v was touched or looked up", it)
					}
					continue
				}
				if it.Status != tt.want {
					t.Fatalf("item %d: %s, want %s", seq, it.Status, tt.want)
				}
				cat := ""
				if it.Error != nil {
					cat = it.Error.Category
				}
				if cat != tt.category {
					t.Fatalf("item %d error %+v, want category %q", seq, it.Error, tt.category)
				}
				if tt.want == store.ItemPending && !it.NextAttemptAt.Equal(f.clk.Now()) {
					t.Fatalf("re-pended item %d next attempt %v, want now", seq, it.NextAttemptAt)
				}
				if tt.err != nil && it.ClaimID != "c" {
					t.Fatalf("item %d claim %q changed", seq, it.ClaimID)
				}
			}
			v := f.view(t, id)
			if c := v.Shards[0].Counts; c.Total() != 3 {
				t.Fatalf("counts %+v do not add up", c)
			}
			items := f.items(t, id)
			var want store.Counts
			for _, it := range items {
				switch it.Status {
				case store.ItemPending:
					want.Pending++
				case store.ItemSubmitted:
					want.Submitted++
				case store.ItemConfirmed:
					want.Confirmed++
				case store.ItemAbandoned:
					want.Abandoned++
				}
			}
			if v.Shards[0].Counts != want {
				t.Fatalf("shard counts %+v, items say %+v", v.Shards[0].Counts, want)
			}
			ev := f.alerts.Of(alert.ItemsNeedReview)
			if tt.alertCount == 0 && len(ev) != 0 {
				t.Fatalf("review alerts %+v", ev)
			}
			if tt.alertCount > 0 {
				if len(ev) != 1 || ev[0].Tenant != "t1" {
					t.Fatalf("review alerts %+v", ev)
				}
				if d := ev[0].Detail.(alert.ItemsNeedReviewDetail); d.JobID != id || d.Count != tt.alertCount {
					t.Fatalf("review detail %+v", d)
				}
				if it := items[1]; it.Error.Code != store.CodeReview || !store.UnderReview(it) {
					t.Fatalf("item not under review: %+v", it)
				}
			}
			if tt.want == store.ItemPending {
				if got := q.Shards(); len(got) != 1 {
					t.Fatalf("re-pended items' shard not kicked: %v", got)
				}
			}
			// The next pass: items under review are not looked up again;
			// failed look-ups are retried.
			f.clk.Advance(time.Minute)
			if _, err := f.rec.Run(ctx); err != nil {
				t.Fatal(err)
			}
			wantAsked := 1
			if tt.err != nil && !errors.Is(tt.err, provider.ErrStatusUnsupported) {
				wantAsked = 2
			}
			if got := p.times(1); got != wantAsked {
				t.Fatalf("item 1 looked up %d times after two passes, want %d", got, wantAsked)
			}
		})
	}
}

// TestSettleAfterBoundary: an item submitted less than SettleAfter ago may
// still be in flight: it is not looked up; at SettleAfter it is.
func TestSettleAfterBoundary(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	id := f.job(t, 1, 1, 1, 0)
	p, _ := f.answering(id, func(int64) (provider.Status, error) { return provider.StatusDelivered, nil })
	f.clk.Advance(time.Minute - time.Nanosecond)
	if rep, err := f.rec.Run(ctx); err != nil || rep.Confirmed != 0 || p.times(1) != 0 {
		t.Fatalf("1ns before SettleAfter: %+v %v, asked %d", rep, err, p.times(1))
	}
	f.clk.Advance(2 * time.Nanosecond)
	if rep, err := f.rec.Run(ctx); err != nil || rep.Confirmed != 1 {
		t.Fatalf("after SettleAfter: %+v %v", rep, err)
	}
}

// TestStaleAfterBoundary: a running shard is re-driven after StaleAfter
// without progress, not before; a job not running is not.
func TestStaleAfterBoundary(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	id := f.job(t, 2, 2, 0, 0)
	_, q := f.answering(id, func(int64) (provider.Status, error) { return provider.StatusUnknown, nil })
	f.clk.Advance(time.Minute - time.Second)
	if rep, err := f.rec.Run(ctx); err != nil || rep.Redriven != 0 || len(q.Shards()) != 0 {
		t.Fatalf("before StaleAfter: %+v %v %v", rep, err, q.Shards())
	}
	f.clk.Advance(2 * time.Second)
	rep, err := f.rec.Run(ctx)
	if err != nil || rep.Redriven != 2 || rep.Pages != 0 {
		t.Fatalf("after StaleAfter: %+v %v", rep, err)
	}
	if got := q.Shards(); len(got) != 2 || got[0] != 1 || got[1] != 1 {
		t.Fatalf("kicked %v, want the first turn of both shards", got)
	}
	// A paused job's shards wait for resume.
	paused := f.job(t, 1, 1, 0, 0)
	if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: paused, To: store.JobPaused, PauseReason: store.PauseManual, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(5 * time.Minute)
	before := len(q.Sent())
	if _, err := f.rec.Run(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range q.Sent()[before:] {
		if k.JobID == paused {
			t.Fatalf("a paused job's shard was kicked: %+v", k)
		}
	}
}

// TestSettleRacesAReclaim: while a look-up runs, the item is re-pended and
// claimed again by a sender (a new claim). The answer was about the old
// send; writing it would settle the new one — the claim-id guard refuses
// it, and the new send stays submitted with its counts true.
func TestSettleRacesAReclaim(t *testing.T) {
	t.Parallel()
	for _, status := range []provider.Status{provider.StatusDelivered, provider.StatusUnknown} {
		t.Run(string(status), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx := context.Background()
			id := f.job(t, 1, 1, 1, 5) // one unit of budget reserved by the old send
			p, _ := f.answering(id, func(int64) (provider.Status, error) { return status, nil })
			var once sync.Once
			p.before = func(seq int64) {
				once.Do(func() {
					sh, err := store.BeginOutsideTurn(ctx, f.store, id, 0)
					if err != nil {
						t.Error(err)
						return
					}
					up, err := f.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: id, Index: 0, At: f.clk.Now(),
						Updates: []store.ItemUpdate{{Seq: seq, From: store.ItemSubmitted, To: store.ItemPending, NextAttemptAt: f.clk.Now()}}})
					if err != nil || len(up.Rejected) > 0 {
						t.Errorf("re-pend: %v %v", err, up.Rejected)
						return
					}
					cl, err := f.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: id, Index: 0, Max: 1, Now: f.clk.Now(), ClaimID: "c2"})
					if err != nil || len(cl.Items) != 1 {
						t.Errorf("re-claim: %v %+v", err, cl.Items)
						return
					}
					if _, err := store.FoldOutsideTurn(ctx, f.store, sh, up.Delta.Add(cl.Delta), nil); err != nil {
						t.Error(err)
					}
				})
			}
			f.clk.Advance(2 * time.Minute)
			if _, err := f.rec.Run(ctx); err != nil {
				t.Fatal(err)
			}
			it := f.items(t, id)[1]
			if it.Status != store.ItemSubmitted || it.ClaimID != "c2" {
				t.Fatalf("the new send was settled by the old answer: %+v", it)
			}
			v := f.view(t, id)
			if c := v.Shards[0].Counts; c != (store.Counts{Submitted: 1}) {
				t.Fatalf("counts %+v, want 1 submitted", c)
			}
			// Nothing was re-pended, so no budget was given back.
			if v.Job.BudgetUsed != 1 {
				t.Fatalf("budget used %d, want 1", v.Job.BudgetUsed)
			}
		})
	}
}

// TestReconcilerFinishesTheJob: the pass that settles a job's last items
// finishes the job (completed when all were delivered, partial when some
// failed) and publishes JobFinished once.
func TestReconcilerFinishesTheJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	id := f.job(t, 2, 2, 2, 0)
	// The senders ended their shards with every item sent, some answers
	// lost: only the reconciler can end the job now.
	for i := range 2 {
		if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: i, To: store.ShardCompleted, At: f.clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	f.answering(id, func(int64) (provider.Status, error) { return provider.StatusDelivered, nil })
	f.clk.Advance(2 * time.Minute)
	rep, err := f.rec.Run(ctx)
	if err != nil || rep.Confirmed != 4 {
		t.Fatalf("pass: %+v %v", rep, err)
	}
	v := f.view(t, id)
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 4 {
		t.Fatalf("job %s counts %+v, want completed", v.Job.Status, v.Counts())
	}
	ev := f.alerts.Of(alert.JobFinished)
	if len(ev) != 1 || ev[0].Detail.(alert.JobFinishedDetail).Status != string(store.JobCompleted) {
		t.Fatalf("finished alerts %+v", ev)
	}
	if _, err := f.rec.Run(ctx); err != nil || len(f.alerts.Of(alert.JobFinished)) != 1 {
		t.Fatalf("a second pass finished it again: %v %+v", err, f.alerts.Of(alert.JobFinished))
	}
}

// TestRependReopensAFinishedJob: a job that ended (partial: an item was
// counted failed) while an item's fate was unknown runs again when the
// look-up says the provider never got it: the item must still be sent.
func TestRependReopensAFinishedJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	id := f.job(t, 1, 1, 1, 0)
	_, q := f.answering(id, func(int64) (provider.Status, error) { return provider.StatusUnknown, nil })
	if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: 0, To: store.ShardFailed, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobPartial, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(2 * time.Minute)
	if rep, err := f.rec.Run(ctx); err != nil || rep.Repended != 1 {
		t.Fatalf("pass: %+v %v", rep, err)
	}
	v := f.view(t, id)
	if v.Job.Status != store.JobRunning || v.Shards[0].Status != store.ShardRunning || v.Shards[0].Counts.Pending != 1 {
		t.Fatalf("job %s shard %s counts %+v, want running with the item pending", v.Job.Status, v.Shards[0].Status, v.Shards[0].Counts)
	}
	if got := q.Shards(); len(got) != 1 {
		t.Fatalf("the reopened shard was not kicked: %v", got)
	}
}

// TestCountsMismatchAlert: a shard whose counts differ from its items is
// recounted and alerted with both sides; a shard whose counts are right
// raises nothing.
func TestCountsMismatchAlert(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	id := f.job(t, 2, 3, 0, 0)
	sh, err := f.store.GetShard(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 1, Epoch: sh.Epoch,
		Delta: store.Counts{Pending: -2, Failed: 2}}); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(5 * time.Minute)
	rep, err := f.rec.Run(ctx)
	if err != nil || rep.Mismatches != 1 {
		t.Fatalf("pass: %+v %v", rep, err)
	}
	ev := f.alerts.Of(alert.CountsMismatch)
	if len(ev) != 1 {
		t.Fatalf("mismatch alerts %+v", ev)
	}
	d := ev[0].Detail.(alert.CountsMismatchDetail)
	if d.JobID != id || d.Shard == nil || *d.Shard != 1 || d.Stored == nil || d.Items == nil || d.Total != 6 || d.Counted != 6 {
		t.Fatalf("detail %+v", d)
	}
	if d.Stored.Failed != 2 || d.Stored.Pending != 1 || d.Items.Pending != 3 || d.Items.Failed != 0 {
		t.Fatalf("stored %+v items %+v", *d.Stored, *d.Items)
	}
	if got := f.view(t, id).Shards[1].Counts; got != (store.Counts{Pending: 3}) {
		t.Fatalf("not recounted: %+v", got)
	}
	// Right counts: the next pass finds nothing.
	f.clk.Advance(5 * time.Minute)
	if rep, err := f.rec.Run(ctx); err != nil || rep.Mismatches != 0 || len(f.alerts.Of(alert.CountsMismatch)) != 1 {
		t.Fatalf("second pass: %+v %v", rep, err)
	}
}

// TestSettlesEveryPage: a backlog larger than a page is settled in one
// pass, page by page.
func TestSettlesEveryPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.rec.PageSize = 3
	id := f.job(t, 2, 4, 4, 0)
	f.answering(id, func(int64) (provider.Status, error) { return provider.StatusDelivered, nil })
	f.clk.Advance(2 * time.Minute)
	rep, err := f.rec.Run(ctx)
	if err != nil || rep.Confirmed != 8 || rep.Pages != 3 || rep.Stopped {
		t.Fatalf("pass: %+v %v", rep, err)
	}
	if rep.OldestSubmitted != 0 {
		t.Fatalf("oldest submitted %v after settling all", rep.OldestSubmitted)
	}
}

// TestPassStopsBeforeTheContextDeadline: a pass settles nothing once it is
// within SafetyMargin (default 15 s) of its context's deadline — the
// Lambda timeout — and settles as usual with time to spare.
func TestPassStopsBeforeTheContextDeadline(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		margin   time.Duration
		deadline time.Duration // from now
		settles  bool
	}{
		{"within the default margin", 0, 10 * time.Second, false},
		{"within a set margin", 30 * time.Second, 20 * time.Second, false},
		{"time to spare", 0, time.Minute, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			// A context's deadline is wall-clock time: the fake clock
			// starts at the wall clock, and the deadline is set from it
			// (in the real future, so the context is not done).
			f.clk = clock.NewFake(time.Now())
			f.rec.Clock = f.clk
			id := f.job(t, 1, 2, 2, 0)
			f.answering(id, func(int64) (provider.Status, error) { return provider.StatusDelivered, nil })
			f.clk.Advance(2 * time.Minute)
			f.rec.SafetyMargin = tt.margin
			ctx, cancel := context.WithDeadline(context.Background(), f.clk.Now().Add(tt.deadline))
			defer cancel()
			rep, err := f.rec.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if settled := rep.Confirmed == 2 && !rep.Stopped; settled != tt.settles || (!tt.settles && (rep.Confirmed != 0 || !rep.Stopped)) {
				t.Fatalf("report %+v, want settled: %v", rep, tt.settles)
			}
		})
	}
}

// TestNextPassResumesAtTheCursor: a pass that stops at its budget leaves
// its cursor; the next pass starts there, not from the first page again
// (whose items, still submitted after a failed look-up, would otherwise be
// asked about again before the rest are reached).
func TestNextPassResumesAtTheCursor(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.rec.PageSize, f.rec.PassBudget = 2, time.Second
	id := f.job(t, 1, 4, 4, 0)
	p, _ := f.answering(id, func(seq int64) (provider.Status, error) {
		if seq <= 2 {
			return "", errors.New("status endpoint down")
		}
		return provider.StatusDelivered, nil
	})
	var first sync.Once
	p.before = func(int64) { first.Do(func() { f.clk.Advance(2 * time.Second) }) } // the first page uses up the budget
	f.clk.Advance(2 * time.Minute)
	rep, err := f.rec.Run(ctx)
	if err != nil || !rep.Stopped || rep.Pages != 1 || rep.LookupFailed != 2 {
		t.Fatalf("first pass: %+v %v", rep, err)
	}
	rep, err = f.rec.Run(ctx)
	if err != nil || rep.Confirmed != 2 || rep.LookupFailed != 0 || rep.Stopped {
		t.Fatalf("second pass: %+v %v, want the second page only", rep, err)
	}
	if p.times(1) != 1 || p.times(3) != 1 {
		t.Fatalf("look-ups: item 1 %d, item 3 %d; want 1 each", p.times(1), p.times(3))
	}
}

// TestUnnamedReconcilersNeverOverlap: two reconcilers left without a
// Holder (two Lambda instances) still hold the lease as two holders: the
// second skips while the first works.
func TestUnnamedReconcilersNeverOverlap(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.job(t, 1, 1, 1, 0)
	p, _ := f.answering(id, func(int64) (provider.Status, error) { return provider.StatusDelivered, nil })
	second := &reconcile.Reconciler{Store: f.store, Queue: f.rec.Queue, Provider: p, Clock: f.clk,
		StaleAfter: time.Minute, SettleAfter: time.Minute, Log: f.rec.Log}
	var inner reconcile.Report
	var innerErr error
	var fired atomic.Bool // once: the second pass's own look-ups come back in here
	p.before = func(int64) {
		if fired.CompareAndSwap(false, true) {
			inner, innerErr = second.Run(context.Background())
		}
	}
	f.clk.Advance(2 * time.Minute)
	if _, err := f.rec.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if innerErr != nil || !inner.Skipped || p.times(1) != 1 {
		t.Fatalf("second reconciler during the first's pass: %+v %v; item looked up %d times", inner, innerErr, p.times(1))
	}
}

// records keeps the messages logged.
type records struct {
	mu   sync.Mutex
	msgs []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func countOf(msgs []string, msg string) int {
	n := 0
	for _, m := range msgs {
		if m == msg {
			n++
		}
	}
	return n
}

// TestPassSummaryLogged: a pass that decided anything logs one summary
// (whatever mix of decisions, which must not cancel out); an idle pass,
// every minute of a quiet day, logs none.
func TestPassSummaryLogged(t *testing.T) {
	t.Parallel()
	down := errors.New("status endpoint down")
	for _, tt := range []struct {
		name    string
		answers []func() (provider.Status, error) // per claimed item
		stale   bool
		corrupt bool // counts differ from the items
		want    int
	}{
		{"idle", nil, false, false, 0},
		{"confirmed and re-pended", []func() (provider.Status, error){
			func() (provider.Status, error) { return provider.StatusDelivered, nil },
			func() (provider.Status, error) { return provider.StatusUnknown, nil }}, false, false, 1},
		{"confirmed and under review", []func() (provider.Status, error){
			func() (provider.Status, error) { return provider.StatusDelivered, nil },
			func() (provider.Status, error) { return "", provider.ErrStatusUnsupported }}, false, false, 1},
		{"under review and look-up failed", []func() (provider.Status, error){
			func() (provider.Status, error) { return "", provider.ErrStatusUnsupported },
			func() (provider.Status, error) { return "", down }}, false, false, 1},
		{"confirmed and look-up failed", []func() (provider.Status, error){
			func() (provider.Status, error) { return provider.StatusDelivered, nil },
			func() (provider.Status, error) { return "", down }}, false, false, 1},
		{"redriven only", nil, true, false, 1},
		{"redriven and mismatched", nil, true, true, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			logs := &records{}
			f.rec.Log = slog.New(logs)
			id := f.job(t, 1, 3, len(tt.answers), 0)
			f.answering(id, func(seq int64) (provider.Status, error) { return tt.answers[seq-1]() })
			if tt.corrupt {
				sh, err := f.store.GetShard(context.Background(), id, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.store.AddShardCounts(context.Background(), store.AddShardCountsParams{JobID: id, Index: 0, Epoch: sh.Epoch,
					Delta: store.Counts{Pending: -1, Failed: 1}}); err != nil {
					t.Fatal(err)
				}
			}
			if !tt.stale {
				f.rec.StaleAfter = 10 * time.Minute // nothing re-driven: the settle decisions alone
			}
			f.clk.Advance(5 * time.Minute)
			if _, err := f.rec.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := countOf(logs.msgs, "reconciled"); n != tt.want {
				t.Fatalf("%d summaries logged, want %d (%v)", n, tt.want, logs.msgs)
			}
		})
	}
}

// TestDefaults: a Reconciler left at its zero config looks up items
// submitted 2 minutes ago, re-drives shards idle for 2 minutes, settles
// for 90 s per pass, and holds its lease 5 minutes.
func TestDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bare := func(f *fixture) *reconcile.Reconciler {
		return &reconcile.Reconciler{Store: f.store, Queue: f.rec.Queue, Provider: f.rec.Provider, Clock: f.clk, Log: f.rec.Log}
	}

	t.Run("settle and stale after 2 minutes", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		id := f.job(t, 1, 2, 1, 0)
		p, _ := f.answering(id, func(int64) (provider.Status, error) { return provider.StatusDelivered, nil })
		r := bare(f)
		f.clk.Advance(2*time.Minute - time.Second)
		if rep, err := r.Run(ctx); err != nil || rep.Confirmed != 0 || rep.Redriven != 0 || p.times(1) != 0 {
			t.Fatalf("a second before 2 minutes: %+v %v", rep, err)
		}
		f.clk.Advance(2 * time.Second)
		if rep, err := r.Run(ctx); err != nil || rep.Confirmed != 1 || rep.Redriven != 1 {
			t.Fatalf("after 2 minutes: %+v %v", rep, err)
		}
	})

	t.Run("pass budget 90 s", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		id := f.job(t, 1, 3, 3, 0)
		p, _ := f.answering(id, func(int64) (provider.Status, error) { return provider.StatusDelivered, nil })
		p.before = func(int64) { f.clk.Advance(50 * time.Second) } // each look-up takes 50 s
		r := bare(f)
		r.PageSize = 1
		f.clk.Advance(5 * time.Minute)
		rep, err := r.Run(ctx)
		if err != nil || rep.Pages != 2 || !rep.Stopped || rep.Confirmed != 2 {
			t.Fatalf("pass: %+v %v, want 2 pages (50 s, 100 s) then a stop", rep, err)
		}
	})

	t.Run("lease held 5 minutes", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		id := f.job(t, 1, 1, 1, 0)
		p, _ := f.answering(id, func(int64) (provider.Status, error) { return provider.StatusDelivered, nil })
		r := bare(f)
		other := bare(f)
		other.Holder = "other"
		var during, after reconcile.Report
		var fired atomic.Bool // not a sync.Once: the other pass's look-up comes back in here
		p.before = func(int64) {
			if !fired.CompareAndSwap(false, true) {
				return
			}
			func() {
				// A very long look-up: the lease still holds at 4:59 …
				f.clk.Advance(5*time.Minute - time.Second)
				during, _ = other.Run(ctx)
				// … and no longer at 5:00, as if this pass had died.
				f.clk.Advance(time.Second)
				after, _ = other.Run(ctx)
			}()
		}
		f.clk.Advance(5 * time.Minute)
		// The other pass took the expired lease: this one cannot release it.
		if _, err := r.Run(ctx); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("release of a lease taken over: %v", err)
		}
		if !during.Skipped || after.Skipped {
			t.Fatalf("another pass at 4:59 %+v, at 5:00 %+v; want skipped, then not", during, after)
		}
	})
}

// TestReviewItemsDoNotStopThePage: an item already under review is passed
// over, and the items after it on the page are still settled.
func TestReviewItemsDoNotStopThePage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	id := f.job(t, 1, 2, 2, 0)
	// The first pass: item 1 goes under review, item 2's look-up fails.
	f.answering(id, func(seq int64) (provider.Status, error) {
		if seq == 1 {
			return "", provider.ErrStatusUnsupported
		}
		return "", errors.New("status endpoint down")
	})
	f.clk.Advance(2 * time.Minute)
	if rep, err := f.rec.Run(ctx); err != nil || rep.UnderReview != 1 || rep.LookupFailed != 1 {
		t.Fatalf("first pass: %+v %v", rep, err)
	}
	// Second pass: item 1 (under review, first on the page) is skipped,
	// item 2 is confirmed.
	f.answering(id, func(int64) (provider.Status, error) { return provider.StatusDelivered, nil })
	rep, err := f.rec.Run(ctx)
	if err != nil || rep.Confirmed != 1 {
		t.Fatalf("second pass: %+v %v", rep, err)
	}
	if it := f.items(t, id); it[1].Status != store.ItemSubmitted || it[2].Status != store.ItemConfirmed {
		t.Fatalf("items %s %s, want submitted (review) and confirmed", it[1].Status, it[2].Status)
	}
}

// failFirstShard is a queue on which turns of shard 0 cannot be enqueued.
type failFirstShard struct{ queue.Queue }

func (q failFirstShard) Send(ctx context.Context, p queue.SendParams) (queue.SendResult, error) {
	if t, err := dispatch.Decode(p.Body); err == nil && t.Shard == 0 {
		return queue.SendResult{}, errors.New("queue unavailable")
	}
	return q.Queue.Send(ctx, p)
}

// TestRedriveGoesOnPastAFailedShard: a stale shard that cannot be
// re-driven is reported, and the other stale shards are re-driven anyway.
func TestRedriveGoesOnPastAFailedShard(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.job(t, 3, 1, 0, 0)
	f.rec.Queue = failFirstShard{f.rec.Queue}
	f.clk.Advance(5 * time.Minute)
	rep, err := f.rec.Run(context.Background())
	if err == nil || rep.Redriven != 2 {
		t.Fatalf("pass: %+v %v, want an error and the 2 other shards re-driven", rep, err)
	}
}

// recountFails is a store whose recounts fail.
type recountFails struct{ store.Store }

func (recountFails) RecountShard(context.Context, string, int) (store.Shard, error) {
	return store.Shard{}, errors.New("recount unavailable")
}

// TestCheckErrorsAreReported: a pass that cannot check a job's counts
// says so (the next pass checks again) instead of reporting success.
func TestCheckErrorsAreReported(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.job(t, 1, 1, 0, 0)
	f.rec.Store = recountFails{f.store}
	f.clk.Advance(5 * time.Minute)
	if _, err := f.rec.Run(context.Background()); err == nil {
		t.Fatal("a pass whose count check failed reported no error")
	}
}

// TestDirtyShardDoesNotStopTheCheck: a shard a turn is folding (dirty) is
// passed over, and the job's other shards are still checked.
func TestDirtyShardDoesNotStopTheCheck(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	id := f.job(t, 2, 2, 0, 0)
	if _, err := store.BeginOutsideTurn(ctx, f.store, id, 0); err != nil {
		t.Fatal(err)
	}
	sh, err := f.store.GetShard(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 1, Epoch: sh.Epoch,
		Delta: store.Counts{Pending: -1, Failed: 1}}); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(5 * time.Minute)
	rep, err := f.rec.Run(ctx)
	if err != nil || rep.Mismatches != 1 {
		t.Fatalf("pass: %+v %v, want shard 1's mismatch found past dirty shard 0", rep, err)
	}
	if v := f.view(t, id); !v.Shards[0].Dirty {
		t.Fatalf("the dirty shard was recounted under its turn: %+v", v.Shards[0])
	}
}
