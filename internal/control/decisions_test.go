package control_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/dispatch/dispatchtest"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

// recorded is a fixture whose controller's turns and alerts are recorded.
type recorded struct {
	fixture
	turns  *dispatchtest.Turns
	alerts *alerttest.Recorder
}

func newRecorded(t *testing.T) recorded {
	t.Helper()
	f := newFixture(t)
	r := recorded{fixture: f, turns: &dispatchtest.Turns{Queue: f.ctl.Queue}, alerts: &alerttest.Recorder{}}
	f.ctl.Queue, f.ctl.Alerts = r.turns, r.alerts
	return r
}

// jobIn creates a job of two shards of perShard pending items and moves it
// to status (through the store's allowed transitions).
func (f fixture) jobIn(t *testing.T, status store.JobStatus, perShard int) string {
	t.Helper()
	ctx := context.Background()
	p, items := storetest.NewJob("t1", 2, perShard)
	if status == store.JobStaging || status == store.JobStarting {
		// A staged job has no shards nor items until it starts.
		p.Shards, p.Job.ShardCount, p.Job.Total, p.Job.Status, items = nil, 0, 0, store.JobStaging, nil
	}
	if _, err := f.store.CreateJob(ctx, p); err != nil {
		t.Fatal(err)
	}
	f.putItems(t, p.Job.ID, items)
	var path []store.JobStatus
	switch status {
	case store.JobCreating, store.JobStaging:
	case store.JobStarting:
		path = []store.JobStatus{store.JobStarting}
	case store.JobRunning, store.JobCompleted, store.JobPartial, store.JobFailed, store.JobCancelled:
		path = []store.JobStatus{store.JobRunning, status}
	case store.JobPaused:
		path = []store.JobStatus{store.JobRunning, store.JobPaused}
	}
	for _, s := range path {
		if s == store.JobRunning && status == store.JobRunning {
			path = path[:1]
		}
		tp := store.TransitionJobParams{JobID: p.Job.ID, To: s, At: f.clk.Now()}
		if s == store.JobPaused {
			tp.PauseReason = store.PauseManual
		}
		if _, err := f.store.TransitionJob(ctx, tp); err != nil {
			t.Fatalf("to %s: %v", s, err)
		}
		if s == status {
			break
		}
	}
	return p.Job.ID
}

func (f fixture) putItems(t *testing.T, jobID string, items []store.Item) {
	t.Helper()
	for start := 0; start < len(items); start += store.MaxPutItems {
		if err := f.store.PutItems(context.Background(), store.PutItemsParams{JobID: jobID, Items: items[start:min(start+store.MaxPutItems, len(items))]}); err != nil {
			t.Fatal(err)
		}
	}
}

func (f fixture) status(t *testing.T, jobID string) store.JobView {
	t.Helper()
	v, err := f.store.GetJob(context.Background(), jobID)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCommandTransitions: every operator command on a job in every status:
// allowed ones reach their status, alert and kick the unfinished shards;
// refused ones are ErrNotAllowed and change, alert and enqueue nothing
// (pause of a cancelled job above all: a resume would then send after the
// cancel).
func TestCommandTransitions(t *testing.T) {
	t.Parallel()
	statuses := []store.JobStatus{store.JobCreating, store.JobStaging, store.JobStarting, store.JobRunning,
		store.JobPaused, store.JobCompleted, store.JobPartial, store.JobFailed, store.JobCancelled}
	commands := []struct {
		name    string
		run     func(*control.Controller, context.Context, string) (store.JobView, error)
		allowed map[store.JobStatus]bool
		to      store.JobStatus
		alert   alert.Type
		kicks   bool
	}{
		{"pause", (*control.Controller).Pause, map[store.JobStatus]bool{store.JobRunning: true}, store.JobPaused, alert.JobPaused, false},
		{"resume", (*control.Controller).Resume, map[store.JobStatus]bool{store.JobPaused: true}, store.JobRunning, "", true},
		{"cancel", (*control.Controller).Cancel, map[store.JobStatus]bool{store.JobRunning: true, store.JobPaused: true,
			store.JobStaging: true, store.JobStarting: true}, store.JobCancelled, alert.JobFinished, true},
	}
	for _, cmd := range commands {
		for _, from := range statuses {
			t.Run(cmd.name+"/"+string(from), func(t *testing.T) {
				t.Parallel()
				f := newRecorded(t)
				ctx := context.Background()
				id := f.jobIn(t, from, 3)
				before := f.status(t, id)
				if before.Job.Status != from {
					t.Fatalf("fixture: %s, want %s", before.Job.Status, from)
				}
				f.clk.Advance(time.Second)
				v, err := cmd.run(f.ctl, ctx, id)
				after := f.status(t, id)
				if !cmd.allowed[from] {
					if !errors.Is(err, control.ErrNotAllowed) {
						t.Fatalf("%s of a %s job: err %v, want ErrNotAllowed", cmd.name, from, err)
					}
					if after.Job.Status != from || !reflect.DeepEqual(after.Job, before.Job) {
						t.Fatalf("refused %s changed the job: %+v → %+v", cmd.name, before.Job, after.Job)
					}
					if len(f.alerts.Events()) != 0 || len(f.turns.Sent()) != 0 {
						t.Fatalf("refused %s: alerts %+v, turns %+v", cmd.name, f.alerts.Events(), f.turns.Sent())
					}
					return
				}
				if err != nil || v.Job.Status != cmd.to || after.Job.Status != cmd.to {
					t.Fatalf("%s of a %s job: %s (stored %s) %v, want %s", cmd.name, from, v.Job.Status, after.Job.Status, err, cmd.to)
				}
				if cmd.alert != "" {
					ev := f.alerts.Of(cmd.alert)
					if len(ev) != 1 || ev[0].Tenant != "t1" || !ev[0].Time.Equal(f.clk.Now()) {
						t.Fatalf("%s alerts: %+v", cmd.alert, ev)
					}
				} else if len(f.alerts.Events()) != 0 {
					t.Fatalf("unexpected alerts %+v", f.alerts.Events())
				}
				kicks := cmd.kicks && from != store.JobStaging && from != store.JobStarting // no shards yet
				if got := f.turns.Shards(); kicks != (len(got) == 2) || (kicks && (got[0] != 1 || got[1] != 1)) || (!kicks && len(got) != 0) {
					t.Fatalf("%s kicked %v, want both shards' first turn: %v", cmd.name, got, kicks)
				}
			})
		}
	}
}

// TestPauseAlertDetail: a manual pause says which job and why.
func TestPauseAlertDetail(t *testing.T) {
	t.Parallel()
	f := newRecorded(t)
	id := f.jobIn(t, store.JobRunning, 1)
	v, err := f.ctl.Pause(context.Background(), id)
	if err != nil || v.Job.PauseReason != store.PauseManual {
		t.Fatalf("pause: %+v %v", v.Job, err)
	}
	ev := f.alerts.Of(alert.JobPaused)
	if len(ev) != 1 {
		t.Fatalf("alerts %+v", ev)
	}
	if d := ev[0].Detail.(alert.JobPausedDetail); d.JobID != id || d.Reason != string(store.PauseManual) {
		t.Fatalf("detail %+v", d)
	}
}

// TestCancelAlertAndKicks: cancel publishes JobFinished with the counts
// as they are, and kicks only the shards that are not finished (their
// turns abandon the remaining items).
func TestCancelAlertAndKicks(t *testing.T) {
	t.Parallel()
	f := newRecorded(t)
	ctx := context.Background()
	id := f.jobIn(t, store.JobRunning, 2)
	for _, to := range []store.ShardStatus{store.ShardRunning, store.ShardCompleted} {
		if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: 0, To: to, At: f.clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.ctl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got := f.turns.Shards(); len(got) != 1 || got[1] != 1 {
		t.Fatalf("cancel kicked %v, want shard 1 only (shard 0 is finished)", got)
	}
	ev := f.alerts.Of(alert.JobFinished)
	if len(ev) != 1 {
		t.Fatalf("alerts %+v", ev)
	}
	if d := ev[0].Detail.(alert.JobFinishedDetail); d.JobID != id || d.Status != string(store.JobCancelled) || d.Counts.Pending != 4 {
		t.Fatalf("detail %+v", d)
	}
}

// TestResumeUnpausesBreakerPausedShards: a job paused by the breaker has
// paused shards; resume runs them again and kicks every unfinished shard
// at its next turn, and leaves finished shards alone.
func TestResumeUnpausesBreakerPausedShards(t *testing.T) {
	t.Parallel()
	f := newRecorded(t)
	ctx := context.Background()
	p, items := storetest.NewJob("t1", 3, 2)
	if _, err := f.store.CreateJob(ctx, p); err != nil {
		t.Fatal(err)
	}
	f.putItems(t, p.Job.ID, items)
	id := p.Job.ID
	if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobRunning, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	shard := func(i int, to ...store.ShardStatus) {
		t.Helper()
		for _, s := range to {
			if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: i, To: s, At: f.clk.Now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	shard(0, store.ShardRunning, store.ShardPaused)
	shard(1, store.ShardRunning)
	shard(2, store.ShardRunning)
	f.failItems(t, id, 2, 2, store.CategoryPermanent)
	shard(2, store.ShardFailed)
	if _, err := f.store.BeginTurn(ctx, store.BeginTurnParams{JobID: id, Index: 1, Turn: 1, MessageID: "m", At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobPaused, PauseReason: store.PauseBreaker, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	v, err := f.ctl.Resume(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if v.Job.Status != store.JobRunning || v.Shards[0].Status != store.ShardRunning || v.Shards[1].Status != store.ShardRunning || v.Shards[2].Status != store.ShardFailed {
		t.Fatalf("after resume: job %s, shards %s %s %s", v.Job.Status, v.Shards[0].Status, v.Shards[1].Status, v.Shards[2].Status)
	}
	if got := f.turns.Shards(); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("resume kicked %v, want shard 0 turn 1 and shard 1 turn 2", got)
	}
}

// TestUpdateLimits: negative limits are refused; a final job keeps its
// limits; a budget given to a job without one counts the sends made so
// far, a job that had one does not count them twice.
func TestUpdateLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRecorded(t)
	neg, negRate, zero := int64(-1), -0.5, int64(0)
	id := f.jobIn(t, store.JobRunning, 2)
	if _, err := f.ctl.UpdateLimits(ctx, id, nil, &neg); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("negative budget: %v", err)
	}
	if _, err := f.ctl.UpdateLimits(ctx, id, &negRate, nil); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("negative rate: %v", err)
	}
	if _, err := f.ctl.UpdateLimits(ctx, "nope", nil, &zero); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
	// Bad input is refused before anything is read.
	if _, err := f.ctl.UpdateLimits(ctx, "nope", &negRate, nil); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("negative rate of an unknown job: %v", err)
	}
	if _, err := f.ctl.UpdateLimits(ctx, "nope", nil, &neg); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("negative budget of an unknown job: %v", err)
	}
	noCap := 0.0
	if v, err := f.ctl.UpdateLimits(ctx, id, &noCap, nil); err != nil || v.Job.RatePerSec != 0 {
		t.Fatalf("rate 0 (no cap): %+v %v", v.Job, err)
	}
	for _, s := range []store.JobStatus{store.JobCompleted, store.JobPartial, store.JobFailed, store.JobCancelled} {
		done := f.jobIn(t, s, 1)
		b := int64(5)
		if _, err := f.ctl.UpdateLimits(ctx, done, nil, &b); !errors.Is(err, control.ErrNotAllowed) {
			t.Fatalf("limits of a %s job: %v", s, err)
		}
		if v := f.status(t, done); v.Job.Budget != 0 {
			t.Fatalf("a %s job's budget changed: %+v", s, v.Job)
		}
	}
	// Sends made before the job had a budget: 3 attempts on shard 0.
	sh, err := f.store.BeginTurn(ctx, store.BeginTurnParams{JobID: id, Index: 0, Turn: 1, MessageID: "m", At: f.clk.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: 0, Turn: 1, Epoch: sh.Epoch, At: f.clk.Now(), Attempts: 3}); err != nil {
		t.Fatal(err)
	}
	if v, err := f.ctl.UpdateLimits(ctx, id, nil, &zero); err != nil || v.Job.BudgetUsed != 0 {
		t.Fatalf("budget 0 (none): %+v %v", v.Job, err)
	}
	b := int64(10)
	v, err := f.ctl.UpdateLimits(ctx, id, nil, &b)
	if err != nil || v.Job.Budget != 10 || v.Job.BudgetUsed != 3 {
		t.Fatalf("first budget: %+v %v", v.Job, err)
	}
	b = 20
	rate := 7.0
	v, err = f.ctl.UpdateLimits(ctx, id, &rate, &b)
	if err != nil || v.Job.Budget != 20 || v.Job.BudgetUsed != 3 || v.Job.RatePerSec != 7 {
		t.Fatalf("raised budget: %+v %v", v.Job, err)
	}
	// Budget removed, then set again: the sends stay counted once.
	if v, err := f.ctl.UpdateLimits(ctx, id, nil, &zero); err != nil || v.Job.Budget != 0 || v.Job.BudgetUsed != 3 {
		t.Fatalf("budget removed: %+v %v", v.Job, err)
	}
	if v, err := f.ctl.UpdateLimits(ctx, id, nil, &b); err != nil || v.Job.Budget != 20 || v.Job.BudgetUsed != 3 {
		t.Fatalf("budget set again: %+v %v, want the 3 sends counted once", v.Job, err)
	}
	// A job without a budget and without sends gets one unused.
	fresh := f.jobIn(t, store.JobRunning, 1)
	if v, err := f.ctl.UpdateLimits(ctx, fresh, nil, &b); err != nil || v.Job.BudgetUsed != 0 || v.Job.Budget != 20 {
		t.Fatalf("budget of a job with no sends: %+v %v", v.Job, err)
	}
}

// failItems claims n items of a shard and fails them with category cat.
func (f fixture) failItems(t *testing.T, jobID string, index, n int, cat string) []int64 {
	t.Helper()
	ctx := context.Background()
	sh, err := f.store.GetShard(ctx, jobID, index)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: jobID, Index: index, Max: n, Now: f.clk.Now(), ClaimID: "fail"})
	if err != nil {
		t.Fatal(err)
	}
	var ups []store.ItemUpdate
	var seqs []int64
	for _, it := range res.Items {
		ups = append(ups, store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, To: store.ItemFailed, AttemptsDelta: 2,
			Error: &store.ItemError{Category: cat, Message: "no"}})
		seqs = append(seqs, it.Seq)
	}
	delta, failures := res.Delta, map[string]int64{}
	for start := 0; start < len(ups); start += store.MaxPutItems {
		up, err := f.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: index, Updates: ups[start:min(start+store.MaxPutItems, len(ups))], At: f.clk.Now()})
		if err != nil {
			t.Fatal(err)
		}
		delta = delta.Add(up.Delta)
		failures = addFailures(failures, up.FailuresDelta)
	}
	if _, err := store.FoldOutsideTurn(ctx, f.store, sh, delta, failures); err != nil {
		t.Fatal(err)
	}
	return seqs
}

func addFailures(a, b map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range a {
		out[k] += v
	}
	for k, v := range b {
		out[k] += v
	}
	return out
}

// TestRedrive: only exhausted and permanent failures are redriven, never
// on a cancelled job; every failed item of the category goes back to
// pending with fresh attempts — past the first page of a shard — and a
// finished job and its shards run again.
func TestRedrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRecorded(t)
	if !control.Redrivable(store.CategoryExhausted) || !control.Redrivable(store.CategoryPermanent) ||
		control.Redrivable(store.CategoryCancelled) || control.Redrivable(store.CategoryUncertain) || control.Redrivable("") {
		t.Fatal("Redrivable categories")
	}
	per := store.MaxPutItems + 20
	id := f.jobIn(t, store.JobRunning, per)
	for i := range 2 {
		if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: i, To: store.ShardRunning, At: f.clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	f.failItems(t, id, 0, per, store.CategoryExhausted)
	f.failItems(t, id, 1, per-10, store.CategoryPermanent)
	// The job finished: shard 0 failed, shard 1 completed with ten sent.
	for i, s := range []store.ShardStatus{store.ShardFailed, store.ShardCompleted} {
		if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: i, To: s, At: f.clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobPartial, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ctl.Redrive(ctx, id, store.CategoryCancelled); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("redrive of cancelled items: %v", err)
	}
	if _, err := f.ctl.Redrive(ctx, "nope", store.CategoryExhausted); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("redrive of an unknown job: %v", err)
	}
	f.clk.Advance(time.Minute)
	n, err := f.ctl.Redrive(ctx, id, store.CategoryExhausted)
	if err != nil || n != per {
		t.Fatalf("redrive exhausted: %d %v, want %d", n, err, per)
	}
	v := f.status(t, id)
	if v.Job.Status != store.JobRunning || v.Shards[0].Status != store.ShardRunning || v.Shards[1].Status != store.ShardCompleted {
		t.Fatalf("after redrive: job %s shards %s %s", v.Job.Status, v.Shards[0].Status, v.Shards[1].Status)
	}
	if c := v.Shards[0].Counts; c.Pending != int64(per) || c.Failed != 0 {
		t.Fatalf("shard 0 counts %+v", c)
	}
	if c := v.Shards[1].Counts; c.Failed != int64(per-10) || c.Pending != 10 {
		t.Fatalf("shard 1 counts (other category) %+v", c)
	}
	page, err := f.store.ListItems(ctx, store.ListItemsParams{JobID: id, Status: store.ItemPending, Shard: new(0), Limit: 1000})
	if err != nil || len(page.Items) != per {
		t.Fatalf("pending items of shard 0: %d %v", len(page.Items), err)
	}
	for _, it := range page.Items {
		if it.Attempts != 0 || it.Error == nil || it.Error.Category != store.CategoryRetryable || !it.NextAttemptAt.Equal(f.clk.Now()) {
			t.Fatalf("redriven item %+v", it)
		}
	}
	if got := f.turns.Shards(); got[0] == 0 {
		t.Fatalf("redrive did not kick shard 0: %v", got)
	}
	// Nothing left of that category: nothing to do.
	if n, err := f.ctl.Redrive(ctx, id, store.CategoryExhausted); err != nil || n != 0 {
		t.Fatalf("second redrive: %d %v", n, err)
	}
	if _, err := f.ctl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ctl.Redrive(ctx, id, store.CategoryPermanent); !errors.Is(err, control.ErrNotAllowed) {
		t.Fatalf("redrive of a cancelled job: %v", err)
	}
	if c := f.status(t, id).Shards[1].Counts; c.Failed != int64(per-10) {
		t.Fatalf("redrive of a cancelled job moved items: %+v", c)
	}
	creating := f.jobIn(t, store.JobCreating, 1)
	if _, err := f.ctl.Redrive(ctx, creating, store.CategoryPermanent); !errors.Is(err, control.ErrNotAllowed) {
		t.Fatalf("redrive of a creating job: %v", err)
	}
}

// reclaimStore runs before, once, just before the next UpdateItems.
type reclaimStore struct {
	store.Store
	mu     sync.Mutex
	before func()
}

func (s *reclaimStore) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	s.mu.Lock()
	hook := s.before
	s.before = nil
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	return s.Store.UpdateItems(ctx, p)
}

// TestResolveDecisions: delivered confirms the item and kicks its shard;
// resend on a cancelled job abandons it instead of sending; an unknown
// outcome or an item not uncertain is refused; an item found past the
// first page is resolved.
func TestResolveDecisions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	review := store.ItemError{Category: store.CategoryUncertain, Code: store.CodeReview, Message: "looked up: unknown"}

	t.Run("delivered", func(t *testing.T) {
		t.Parallel()
		f := newRecorded(t)
		f.ctl.Queue = f.turns
		id, items := f.runningJob(t, 2)
		f.mark(t, id, review, items[0].Seq)
		if _, err := f.ctl.Resolve(ctx, id, items[0].Seq, "maybe"); !errors.Is(err, store.ErrInvalidArgument) {
			t.Fatalf("unknown outcome: %v", err)
		}
		if _, err := f.ctl.Resolve(ctx, id, items[1].Seq, control.Delivered); !errors.Is(err, control.ErrNotUnderReview) {
			t.Fatalf("item not uncertain: %v", err)
		}
		it, err := f.ctl.Resolve(ctx, id, items[0].Seq, control.Delivered)
		if err != nil || it.Status != store.ItemConfirmed {
			t.Fatalf("delivered: %+v %v", it, err)
		}
		v := f.status(t, id)
		if c := v.Counts(); c.Confirmed != 1 || c.Submitted != 1 {
			t.Fatalf("counts %+v", c)
		}
		if got := f.turns.Shards(); len(got) != 1 || got[0] != v.Shards[0].Turn+1 {
			t.Fatalf("kicked %v, want shard 0", got)
		}
	})

	// The shard may wait only for the resolved item: it is kicked when
	// the job runs or was cancelled (its turn ends the shard), not while
	// the job is paused (resume kicks it).
	for _, tc := range []struct {
		status store.JobStatus
		kick   bool
	}{{store.JobCancelled, true}, {store.JobPaused, false}} {
		t.Run("delivered on a "+string(tc.status)+" job", func(t *testing.T) {
			t.Parallel()
			f := newRecorded(t)
			id, items := f.runningJob(t, 2)
			f.mark(t, id, review, items[0].Seq)
			tp := store.TransitionJobParams{JobID: id, To: tc.status, At: f.clk.Now()}
			if tc.status == store.JobPaused {
				tp.PauseReason = store.PauseManual
			}
			if _, err := f.store.TransitionJob(ctx, tp); err != nil {
				t.Fatal(err)
			}
			if it, err := f.ctl.Resolve(ctx, id, items[0].Seq, control.Delivered); err != nil || it.Status != store.ItemConfirmed {
				t.Fatalf("delivered: %+v %v", it, err)
			}
			if got := f.turns.Shards(); (len(got) == 1) != tc.kick {
				t.Fatalf("kicked %v, want a kick: %v", got, tc.kick)
			}
		})
	}

	t.Run("resend on a cancelled job abandons", func(t *testing.T) {
		t.Parallel()
		f := newRecorded(t)
		id, items := f.runningJob(t, 2)
		f.mark(t, id, review, items[0].Seq)
		if _, err := f.ctl.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		it, err := f.ctl.Resolve(ctx, id, items[0].Seq, control.Resend)
		if err != nil || it.Status != store.ItemAbandoned {
			t.Fatalf("resend after cancel: %+v %v", it, err)
		}
		page, err := f.store.ListItems(ctx, store.ListItemsParams{JobID: id, Status: store.ItemAbandoned})
		if err != nil || len(page.Items) != 1 || page.Items[0].Error == nil || page.Items[0].Error.Category != store.CategoryCancelled {
			t.Fatalf("abandoned items %+v %v", page.Items, err)
		}
		if c := f.status(t, id).Counts(); c.Pending != 0 || c.Abandoned != 1 {
			t.Fatalf("counts %+v", c)
		}
	})

	t.Run("resend on a running job re-pends", func(t *testing.T) {
		t.Parallel()
		f := newRecorded(t)
		id, items := f.runningJob(t, 2)
		f.mark(t, id, review, items[1].Seq)
		it, err := f.ctl.Resolve(ctx, id, items[1].Seq, control.Resend)
		if err != nil || it.Status != store.ItemPending {
			t.Fatalf("resend: %+v %v", it, err)
		}
		if c := f.status(t, id).Counts(); c.Pending != 1 || c.Submitted != 1 {
			t.Fatalf("counts %+v", c)
		}
		if got := f.turns.Shards(); len(got) != 1 {
			t.Fatalf("resend kicked %v", got)
		}
	})

	t.Run("found past the first page", func(t *testing.T) {
		t.Parallel()
		f := newRecorded(t)
		id, items := f.runningJob(t, 1001)
		var seqs []int64
		for _, it := range items {
			seqs = append(seqs, it.Seq)
		}
		for start := 0; start < len(seqs); start += store.MaxPutItems {
			f.mark(t, id, review, seqs[start:min(start+store.MaxPutItems, len(seqs))]...)
		}
		last := seqs[len(seqs)-1]
		if it, err := f.ctl.Resolve(ctx, id, last, control.Delivered); err != nil || it.Seq != last {
			t.Fatalf("last item: %+v %v", it, err)
		}
		if _, err := f.ctl.Resolve(ctx, id, last+1, control.Delivered); !errors.Is(err, control.ErrNotUnderReview) {
			t.Fatalf("no such item: %v", err)
		}
	})
}

// TestResolveRacesAReclaim: between the operator's read and write, the
// reconciler re-pends the item and a sender claims it again (a new claim):
// the operator's verdict was about the old send, so it must not settle the
// new one — the claim-id guard refuses it and nothing changes.
func TestResolveRacesAReclaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, r := range []control.Resolution{control.Delivered, control.Resend} {
		t.Run(string(r), func(t *testing.T) {
			t.Parallel()
			f := newRecorded(t)
			id, items := f.runningJob(t, 1)
			seq := items[0].Seq
			f.mark(t, id, store.ItemError{Category: store.CategoryUncertain, Code: store.CodeReview, Message: "review"}, seq)
			rs := &reclaimStore{Store: f.store}
			rs.before = func() {
				sh, err := f.store.GetShard(ctx, id, 0)
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
				if _, err := store.FoldOutsideTurn(ctx, f.store, sh, up.Delta.Add(cl.Delta), up.FailuresDelta); err != nil {
					t.Error(err)
				}
			}
			ctl := &control.Controller{Store: rs, Queue: f.turns, Clock: f.clk}
			if _, err := ctl.Resolve(ctx, id, seq, r); !errors.Is(err, control.ErrNotUnderReview) {
				t.Fatalf("resolve racing a re-claim: %v, want ErrNotUnderReview", err)
			}
			page, err := f.store.ListItems(ctx, store.ListItemsParams{JobID: id})
			if err != nil || len(page.Items) != 1 {
				t.Fatal(err)
			}
			if it := page.Items[0]; it.Status != store.ItemSubmitted || it.ClaimID != "c2" {
				t.Fatalf("the new send was settled by the old verdict: %+v", it)
			}
			if c := f.status(t, id).Counts(); c.Submitted != 1 || c.Confirmed != 0 || c.Pending != 0 {
				t.Fatalf("counts %+v", c)
			}
		})
	}
}

// TestResumeApprovesTheCanary: resuming a job paused for its canary
// approves it and records the canary's results as they were; resuming
// another pause approves nothing.
func TestResumeApprovesTheCanary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, reason := range []store.PauseReason{store.PauseCanary, store.PauseManual} {
		t.Run(string(reason), func(t *testing.T) {
			t.Parallel()
			f := newRecorded(t)
			id := f.jobIn(t, store.JobRunning, 3)
			if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: 0, To: store.ShardRunning, At: f.clk.Now()}); err != nil {
				t.Fatal(err)
			}
			f.failItems(t, id, 0, 1, store.CategoryPermanent)
			if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobPaused, PauseReason: reason, At: f.clk.Now()}); err != nil {
				t.Fatal(err)
			}
			v, err := f.ctl.Resume(ctx, id)
			if err != nil || v.Job.Status != store.JobRunning {
				t.Fatalf("resume: %+v %v", v.Job, err)
			}
			canary := reason == store.PauseCanary
			if v.Job.CanaryApproved != canary || (canary && (v.Job.CanaryFailed != 1 || v.Job.CanaryConfirmed != 0)) {
				t.Fatalf("after resuming a %s pause: approved %v, canary results %d confirmed %d failed", reason, v.Job.CanaryApproved, v.Job.CanaryConfirmed, v.Job.CanaryFailed)
			}
		})
	}
}

// TestRedriveCountsOnlyWhatItMoved: an item another operator moved
// between the listing and the write is not counted as redriven by this
// one, and is not moved twice.
func TestRedriveCountsOnlyWhatItMoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRecorded(t)
	id := f.jobIn(t, store.JobRunning, 4)
	if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: 0, To: store.ShardRunning, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	seqs := f.failItems(t, id, 0, 3, store.CategoryExhausted)
	rs := &reclaimStore{Store: f.store}
	rs.before = func() {
		// The other operator: one of the failed items back to pending.
		sh, err := store.BeginOutsideTurn(ctx, f.store, id, 0)
		if err != nil {
			t.Error(err)
			return
		}
		up, err := f.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: id, Index: 0, At: f.clk.Now(),
			Updates: []store.ItemUpdate{{Seq: seqs[1], From: store.ItemFailed, To: store.ItemPending, ResetAttempts: true, NextAttemptAt: f.clk.Now()}}})
		if err != nil || len(up.Rejected) > 0 {
			t.Errorf("other redrive: %v %v", err, up.Rejected)
			return
		}
		if _, err := store.FoldOutsideTurn(ctx, f.store, sh, up.Delta, up.FailuresDelta); err != nil {
			t.Error(err)
		}
	}
	ctl := &control.Controller{Store: rs, Queue: f.turns, Clock: f.clk}
	n, err := ctl.Redrive(ctx, id, store.CategoryExhausted)
	if err != nil || n != 2 {
		t.Fatalf("redrive: %d %v, want the 2 it moved", n, err)
	}
	if c := f.status(t, id).Shards[0].Counts; c.Pending != 4 || c.Failed != 0 {
		t.Fatalf("counts %+v", c)
	}
}

// TestResendRacesACancel: the job is cancelled (and its shard's turns
// ended) between the operator's read and the resend's write: the item
// must not stay pending in a job nothing will run again — it is abandoned.
func TestResendRacesACancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newRecorded(t)
	id, items := f.runningJob(t, 2)
	seq := items[0].Seq
	f.mark(t, id, store.ItemError{Category: store.CategoryUncertain, Code: store.CodeReview, Message: "review"}, seq)
	rs := &reclaimStore{Store: f.store}
	rs.before = func() {
		if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobCancelled, At: f.clk.Now()}); err != nil {
			t.Error(err)
		}
		if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: 0, To: store.ShardCancelled, At: f.clk.Now()}); err != nil {
			t.Error(err)
		}
	}
	ctl := &control.Controller{Store: rs, Queue: f.turns, Clock: f.clk}
	if _, err := ctl.Resolve(ctx, id, seq, control.Resend); err != nil {
		t.Fatal(err)
	}
	page, err := f.store.ListItems(ctx, store.ListItemsParams{JobID: id, Status: store.ItemPending})
	if err != nil || len(page.Items) != 0 {
		t.Fatalf("items left pending in a cancelled job: %+v %v", page.Items, err)
	}
	if c := f.status(t, id).Counts(); c.Pending != 0 || c.Abandoned != 1 || c.Submitted != 1 {
		t.Fatalf("counts %+v, want the resent item abandoned", c)
	}
}
