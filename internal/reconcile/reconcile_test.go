package reconcile_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

// fakeProvider answers look-ups from a set of delivered keys; hook, when
// set, runs inside every look-up.
type fakeProvider struct {
	mu        sync.Mutex
	delivered map[string]bool
	calls     map[string]int
	hook      func(key string)
}

func (p *fakeProvider) Send(context.Context, provider.SendRequest) (provider.SendResult, error) {
	return provider.SendResult{}, errors.New("not used")
}

func (p *fakeProvider) Status(_ context.Context, req provider.StatusRequest) (provider.Status, error) {
	p.mu.Lock()
	p.calls[req.Key]++
	hook := p.hook
	d := p.delivered[req.Key]
	p.mu.Unlock()
	if hook != nil {
		hook(req.Key)
	}
	if d {
		return provider.StatusDelivered, nil
	}
	return provider.StatusUnknown, nil
}

func (p *fakeProvider) totalCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		n += c
	}
	return n
}

type fixture struct {
	store  *sqlitestore.Store
	clk    *clock.Fake
	prov   *fakeProvider
	alerts *alerttest.Recorder
	rec    *reconcile.Reconciler
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := clock.NewFake(storetest.Epoch)
	q, err := sqlitequeue.Open(ctx, filepath.Join(dir, "queue.db"), sqlitequeue.Options{Name: "work", DeadLetter: "dlq", MaxReceiveCount: 10, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	f := &fixture{store: st, clk: clk, prov: &fakeProvider{delivered: map[string]bool{}, calls: map[string]int{}}, alerts: &alerttest.Recorder{}}
	f.rec = &reconcile.Reconciler{Store: st, Queue: q, Provider: f.prov, Clock: clk, Alerts: f.alerts,
		Log:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		StaleAfter: time.Minute, SettleAfter: time.Minute}
	return f
}

// job creates a running job of shards × perShard items and claims
// claimed items of each shard (left submitted, as after a crash).
// deliveredThenCancelled makes the provider know items 0..3 of the
// one-shard job id as delivered, then cancels the job and its shard: a
// final shard that gets no more turns, its submitted items left to the
// reconciler's look-ups.
func (f *fixture) deliveredThenCancelled(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	for seq := range int64(4) {
		f.prov.delivered[sender.MessageKey(id, seq)] = true
	}
	if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobCancelled, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: 0, To: store.ShardCancelled, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) job(t *testing.T, shards, perShard, claimed int, budget int64) string {
	t.Helper()
	ctx := context.Background()
	p, items := storetest.NewJob("t1", shards, perShard)
	p.Job.Budget = budget
	if _, err := f.store.CreateJob(ctx, p); err != nil {
		t.Fatal(err)
	}
	for start := 0; start < len(items); start += store.MaxPutItems {
		if err := f.store.PutItems(ctx, store.PutItemsParams{JobID: p.Job.ID, Items: items[start:min(start+store.MaxPutItems, len(items))]}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: p.Job.ID, To: store.JobRunning, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	for i := range shards {
		if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: p.Job.ID, Index: i, To: store.ShardRunning, At: f.clk.Now()}); err != nil {
			t.Fatal(err)
		}
		if claimed == 0 {
			continue
		}
		if budget > 0 {
			if _, err := f.store.ReserveBudget(ctx, p.Job.ID, int64(claimed)); err != nil {
				t.Fatal(err)
			}
		}
		sh, err := store.BeginOutsideTurn(ctx, f.store, p.Job.ID, i)
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: p.Job.ID, Index: i, Max: claimed, Now: f.clk.Now(), ClaimID: "c"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.FoldOutsideTurn(ctx, f.store, sh, res.Delta, nil); err != nil {
			t.Fatal(err)
		}
	}
	return p.Job.ID
}

func (f *fixture) view(t *testing.T, id string) store.JobView {
	t.Helper()
	v, err := f.store.GetJob(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// listFails is a store whose submitted-items listing fails.
type listFails struct{ store.Store }

func (listFails) ListSubmittedItems(context.Context, store.ListSubmittedItemsParams) (store.ListItemsResult, error) {
	return store.ListItemsResult{}, errors.New("listing unavailable")
}

// TestRedriveRunsWhateverSettleDoes: a settle that fails (or cannot finish)
// must not keep stale shards from being re-driven.
func TestRedriveRunsWhateverSettleDoes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.job(t, 2, 3, 0, 0)
	f.clk.Advance(5 * time.Minute)
	f.rec.Store = listFails{f.store}
	rep, err := f.rec.Run(context.Background())
	if err == nil {
		t.Fatal("Run: no error although the listing failed")
	}
	if rep.Redriven != 2 {
		t.Fatalf("redriven %d stale shards, want 2 although settling failed", rep.Redriven)
	}
}

// TestCountsComparedPerStatus: a shard whose counts add up to its total
// but are wrong status by status is found, recounted and reported.
func TestCountsComparedPerStatus(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	id := f.job(t, 1, 4, 0, 0)
	sh, err := f.store.GetShard(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A lost fold elsewhere: counts say one confirmed, items say none.
	if _, err := f.store.AddShardCounts(ctx, store.AddShardCountsParams{JobID: id, Index: 0, Epoch: sh.Epoch,
		Delta: store.Counts{Pending: -1, Confirmed: 1}}); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(5 * time.Minute) // stale: the pass touches the job
	if _, err := f.rec.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.view(t, id).Shards[0].Counts; got != (store.Counts{Pending: 4}) {
		t.Fatalf("counts after the pass %+v, want recounted to 4 pending", got)
	}
	if n := len(f.alerts.Of(alert.CountsMismatch)); n != 1 {
		t.Fatalf("%d CountsMismatch alerts, want 1", n)
	}
}

// TestRependGivesBackBudget: an item the provider never received goes back
// to pending and will reserve budget again when claimed, so the budget its
// lost send reserved is given back.
func TestRependGivesBackBudget(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.job(t, 1, 5, 2, 5)
	if used := f.view(t, id).Job.BudgetUsed; used != 2 {
		t.Fatalf("budget used %d before, want 2", used)
	}
	f.clk.Advance(2 * time.Minute)
	rep, err := f.rec.Run(context.Background())
	if err != nil || rep.Repended != 2 {
		t.Fatalf("Run: %+v %v", rep, err)
	}
	if used := f.view(t, id).Job.BudgetUsed; used != 0 {
		t.Fatalf("budget used %d after both items were re-pended, want 0", used)
	}
}

// cancelOnWrite is a store that cancels a job (as an operator's cancel and
// its senders would: job cancelled, pending items abandoned, shards
// cancelled) right before the reconciler writes its results.
type cancelOnWrite struct {
	store.Store
	once  sync.Once
	jobID string
	clk   clock.Clock
}

func (s *cancelOnWrite) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	s.once.Do(func() {
		if _, err := s.Store.TransitionJob(ctx, store.TransitionJobParams{JobID: s.jobID, To: store.JobCancelled, At: s.clk.Now()}); err != nil {
			panic(err)
		}
		if _, err := s.Store.TransitionShard(ctx, store.TransitionShardParams{JobID: s.jobID, Index: 0, To: store.ShardCancelled, At: s.clk.Now()}); err != nil {
			panic(err)
		}
	})
	return s.Store.UpdateItems(ctx, p)
}

// TestCancelDuringPass: a cancel that completes while a pass settles must
// not leave a re-pended item pending for ever in a cancelled shard.
func TestCancelDuringPass(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.job(t, 1, 2, 2, 0)
	f.clk.Advance(2 * time.Minute)
	f.rec.Store = &cancelOnWrite{Store: f.store, jobID: id, clk: f.clk}
	if _, err := f.rec.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	page, err := f.store.ListItems(context.Background(), store.ListItemsParams{JobID: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range page.Items {
		if it.Status == store.ItemPending {
			t.Fatalf("item %d left pending in a cancelled job", it.Seq)
		}
	}
}

// TestPassesNeverOverlap: a pass that starts while another runs does
// nothing (no second look-up of the same items).
func TestPassesNeverOverlap(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.job(t, 1, 3, 3, 0)
	f.clk.Advance(2 * time.Minute)
	inside := make(chan struct{})
	release := make(chan struct{})
	var first atomic.Bool
	f.prov.hook = func(string) {
		if first.CompareAndSwap(false, true) {
			close(inside)
			if !released(release) {
				t.Error("the first pass's look-up was never released")
			}
		}
	}
	done := make(chan error, 1)
	go func() { _, err := f.rec.Run(context.Background()); done <- err }()
	recv(t, inside, "the first pass's first look-up")
	// Another process's reconciler on the same store.
	second := &reconcile.Reconciler{Store: f.store, Queue: f.rec.Queue, Provider: f.prov, Clock: f.clk,
		StaleAfter: time.Minute, SettleAfter: time.Minute, Holder: "other"}
	_, err := second.Run(context.Background())
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	if err := recv(t, done, "the first pass"); err != nil {
		t.Fatal(err)
	}
	if n := f.prov.totalCalls(); n != 3 {
		t.Fatalf("%d look-ups for 3 items: passes overlapped", n)
	}
}

// TestBoundedPassesResume: a pass works page by page, writing each page's
// results before reading the next, stops at its budget, and the next pass
// resumes where it stopped; look-ups are dealt fairly across jobs.
func TestBoundedPassesResume(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	var jobs []string
	for range 3 {
		jobs = append(jobs, f.job(t, 1, 10, 10, 0))
	}
	f.clk.Advance(2 * time.Minute)
	var mu sync.Mutex
	var order []string
	f.prov.hook = func(key string) {
		mu.Lock()
		order = append(order, key)
		mu.Unlock()
		f.clk.Advance(time.Second) // a slow provider: 1 s a look-up
	}
	f.rec.PageSize, f.rec.Lookups, f.rec.PassBudget = 12, 1, 20*time.Second
	rep, err := f.rec.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Stopped || rep.Pages != 2 || rep.Repended != 24 {
		t.Fatalf("first pass %+v, want stopped after 2 pages and 24 items settled", rep)
	}
	settled := 0
	for _, id := range jobs {
		settled += int(f.view(t, id).Counts().Pending)
	}
	if settled != 24 {
		t.Fatalf("%d items written back to pending after the first pass, want 24 (each page written as it goes)", settled)
	}
	jobOf := func(key string) string { j, _, _ := strings.Cut(key, ":"); return j }
	if a, b := jobOf(order[0]), jobOf(order[1]); a == b {
		t.Fatalf("first look-ups %v: not dealt across jobs", order[:3])
	}
	rep, err = f.rec.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stopped || rep.Repended != 6 {
		t.Fatalf("second pass %+v, want the last 6 items and done", rep)
	}
	for key, n := range f.prov.calls {
		if n != 1 {
			t.Fatalf("key %s looked up %d times, want once (the second pass resumes)", key, n)
		}
	}
	if len(f.prov.calls) != 30 {
		t.Fatalf("%d keys looked up, want 30", len(f.prov.calls))
	}
}

// lostSettle applies the first item update and then reports it failed, as
// a store whose answer is lost does.
type lostSettle struct {
	store.Store
	once sync.Once
}

func (l *lostSettle) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	res, err := l.Store.UpdateItems(ctx, p)
	lost := false
	l.once.Do(func() { lost = true })
	if lost && err == nil {
		return store.UpdateItemsResult{}, errors.New("answer lost after the write")
	}
	return res, err
}

// TestSettleWithLostAnswerLeavesTrueCounts (found by the chaos suite): a
// job cancelled while items awaited their look-up has a final shard that
// gets no more turns; when the settle's item write is applied but its
// answer lost, the counts must still come out true, not stay at
// "submitted" for ever.
func TestSettleWithLostAnswerLeavesTrueCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	id := f.job(t, 1, 2, 2, 0)
	f.deliveredThenCancelled(t, id)
	f.clk.Advance(2 * time.Minute)
	f.rec.Store = &lostSettle{Store: f.store}
	_, _ = f.rec.Run(ctx) // the pass reports the lost answer
	f.rec.Store = f.store
	if _, err := f.rec.Run(ctx); err != nil {
		t.Fatal(err)
	}
	v := f.view(t, id)
	if c := v.Counts(); c.Confirmed != 2 || c.Submitted != 0 {
		t.Fatalf("counts %+v after the look-ups confirmed both items; want 2 confirmed", c)
	}
}

// gauges records the reconciler's gauges.
type gauges struct{ submitted, stuck []time.Duration }

func (g *gauges) OldestSubmittedAge(_ context.Context, d time.Duration) {
	g.submitted = append(g.submitted, d)
}
func (g *gauges) OldestStuckShardAge(_ context.Context, d time.Duration) {
	g.stuck = append(g.stuck, d)
}

// TestStuckShardAgeIsPublished: every pass publishes how long the stalest
// re-driven shard had gone without progress (the StuckShard alarm's
// metric), and 0 once no shard is stale.
func TestStuckShardAgeIsPublished(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	g := &gauges{}
	f.rec.Gauges = g
	id := f.job(t, 2, 3, 0, 0)
	f.clk.Advance(7 * time.Minute)
	rep, err := f.rec.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Redriven != 2 || rep.OldestStuck != 7*time.Minute {
		t.Fatalf("redriven %d, oldest stuck %v; want 2 and 7m", rep.Redriven, rep.OldestStuck)
	}
	// The shards advance: nothing is stale on the next pass.
	for i := range 2 {
		if _, err := f.store.TransitionShard(context.Background(), store.TransitionShardParams{JobID: id, Index: i, To: store.ShardCompleted, At: f.clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	f.clk.Advance(time.Second)
	if _, err := f.rec.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(g.stuck) != 2 || g.stuck[0] != 7*time.Minute || g.stuck[1] != 0 {
		t.Errorf("stuck-shard gauge %v, want [7m 0s]", g.stuck)
	}
}

// expirer records the retention calls.
type expirer struct{ calls []store.ExpireItemsParams }

func (e *expirer) ExpireFinishedItems(_ context.Context, p store.ExpireItemsParams) (store.ExpireItemsResult, error) {
	e.calls = append(e.calls, p)
	return store.ExpireItemsResult{Records: 3, Jobs: 1}, nil
}

// TestPassExpiresFinishedJobsItems: with a retention set, every pass asks
// the store to mark a bounded batch of finished jobs' item records; with
// none, item data is kept.
func TestPassExpiresFinishedJobsItems(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	e := &expirer{}
	f.rec.Expirer = e
	if _, err := f.rec.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(e.calls) != 0 {
		t.Fatalf("no retention set, yet %d expiry calls", len(e.calls))
	}
	f.rec.Retention = 30 * 24 * time.Hour
	rep, err := f.rec.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(e.calls) != 1 || e.calls[0].Retain != f.rec.Retention || e.calls[0].Limit != 500 || !e.calls[0].Now.Equal(f.clk.Now()) {
		t.Fatalf("expiry calls %+v, want one with the retention and a limit of 500", e.calls)
	}
	if rep.ItemRecordsExpired != 3 {
		t.Errorf("report: %d records expired, want 3", rep.ItemRecordsExpired)
	}
}

// diesAfterSettle is a store whose process dies right after the settle's
// item write is applied: every later call fails, so neither the fold nor
// any repair runs.
type diesAfterSettle struct {
	store.Store
	dead atomic.Bool
}

var errDied = errors.New("process died")

func (d *diesAfterSettle) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	if d.dead.Load() {
		return store.UpdateItemsResult{}, errDied
	}
	res, err := d.Store.UpdateItems(ctx, p)
	d.dead.Store(true)
	return res, err
}

func (d *diesAfterSettle) AddShardCounts(ctx context.Context, p store.AddShardCountsParams) (store.Shard, error) {
	if d.dead.Load() {
		return store.Shard{}, errDied
	}
	return d.Store.AddShardCounts(ctx, p)
}

func (d *diesAfterSettle) RecountShard(ctx context.Context, id string, i int) (store.Shard, error) {
	if d.dead.Load() {
		return store.Shard{}, errDied
	}
	return d.Store.RecountShard(ctx, id, i)
}

func (d *diesAfterSettle) ReleaseLease(ctx context.Context, p store.ReleaseLeaseParams) error {
	if d.dead.Load() {
		return errDied
	}
	return d.Store.ReleaseLease(ctx, p)
}

// TestSweepRecountsDirtyFinalShards: a pass dies between the settle's
// item write and its count fold, on the final shard of a cancelled job
// (no more turns, and no submitted item left for the next pass to look
// at). The shard is left dirty with counts that say "submitted"; the next
// pass finds it, recounts it, clears the mark and reports the mismatch.
func TestSweepRecountsDirtyFinalShards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	id := f.job(t, 1, 3, 2, 0)
	for seq := range int64(3) {
		f.prov.delivered[sender.MessageKey(id, seq)] = true
	}
	if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobCancelled, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: 0, To: store.ShardCancelled, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(2 * time.Minute)
	f.rec.Store = &diesAfterSettle{Store: f.store}
	if _, err := f.rec.Run(ctx); !errors.Is(err, errDied) {
		t.Fatalf("Run: %v, want the process's death", err)
	}
	sh := f.view(t, id).Shards[0]
	if !sh.Dirty || sh.Counts.Submitted != 2 {
		t.Fatalf("after the death: shard %+v, want dirty with 2 counted submitted (the items are confirmed)", sh)
	}
	// A new process; the dead one's lease expires.
	f.clk.Advance(6 * time.Minute)
	f.rec.Store = f.store
	rep, err := f.rec.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mismatches != 1 {
		t.Fatalf("pass %+v; want the mismatch found", rep)
	}
	// The recount found an item still pending (abandoned meanwhile): the
	// mark is cleared by the next pass, once nothing is left to move.
	f.clk.Advance(time.Minute)
	rep2, err := f.rec.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rep.Swept += rep2.Swept
	sh = f.view(t, id).Shards[0]
	// The never-claimed item of the cancelled job is abandoned too.
	if want := (store.Counts{Confirmed: 2, Abandoned: 1}); sh.Counts != want || sh.Dirty {
		t.Fatalf("after the next pass: counts %+v dirty %v, want %+v and clean", sh.Counts, sh.Dirty, want)
	}
	if rep.Swept != 1 || rep.Mismatches != 1 || len(f.alerts.Of(alert.CountsMismatch)) != 1 {
		t.Fatalf("pass %+v, %d CountsMismatch alerts; want 1 shard swept, 1 mismatch reported", rep, len(f.alerts.Of(alert.CountsMismatch)))
	}
	refs, err := f.store.ListDirtyShards(ctx, store.ListDirtyShardsParams{})
	if err != nil || len(refs) != 0 {
		t.Fatalf("dirty shards after the sweep: %v %v", refs, err)
	}
}

// jobReopenFails is a store whose job transitions fail, as a redrive's
// "reopen job" did after it had reopened the shard.
type jobReopenFails struct{ store.Store }

func (jobReopenFails) TransitionJob(context.Context, store.TransitionJobParams) (store.Job, error) {
	return store.Job{}, errors.New("store unavailable")
}

// TestRunningShardOfFinishedJobRunsAgain (found by the chaos suite, seed
// 11001068): a redrive reopens the finished shard, then fails to reopen
// the job, before any item moved. The job stays partial with a running,
// dirty shard that nothing re-drove; the reconciler runs it again, and
// its turn finishes it (and the job) with true counts.
func TestRunningShardOfFinishedJobRunsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	id := f.job(t, 1, 2, 0, 0)
	fail := func(seq int64) store.ItemUpdate {
		return store.ItemUpdate{Seq: seq, From: store.ItemPending, To: store.ItemFailed, Error: &store.ItemError{Category: store.CategoryPermanent}}
	}
	sh, err := store.BeginOutsideTurn(ctx, f.store, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	page, err := f.store.ListItems(ctx, store.ListItemsParams{JobID: id})
	if err != nil {
		t.Fatal(err)
	}
	var ups []store.ItemUpdate
	for _, it := range page.Items {
		ups = append(ups, fail(it.Seq))
	}
	res, err := f.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: id, Index: 0, Updates: ups, At: f.clk.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.FoldOutsideTurn(ctx, f.store, sh, res.Delta, res.FailuresDelta); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.TransitionShard(ctx, store.TransitionShardParams{JobID: id, Index: 0, To: store.ShardFailed, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.TransitionJob(ctx, store.TransitionJobParams{JobID: id, To: store.JobFailed, At: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	c := &control.Controller{Store: jobReopenFails{f.store}, Queue: f.rec.Queue, Clock: f.clk}
	if _, err := c.Redrive(ctx, id, store.CategoryPermanent); err == nil {
		t.Fatal("redrive: no error although the job could not be reopened")
	}
	if v := f.view(t, id); v.Shards[0].Status != store.ShardRunning || v.Job.Status != store.JobFailed {
		t.Fatalf("after the failed redrive: job %s shard %s, want failed and running", v.Job.Status, v.Shards[0].Status)
	}
	f.clk.Advance(2 * time.Minute) // the reopened shard is stale
	rep, err := f.rec.Run(ctx)
	if err != nil || rep.Redriven != 1 {
		t.Fatalf("Run: %+v %v; want the running shard of the finished job re-driven", rep, err)
	}
	if st := f.view(t, id).Job.Status; st != store.JobRunning {
		t.Fatalf("job %s after the pass, want running again (its shard's turn finishes it)", st)
	}
}
