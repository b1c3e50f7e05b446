// Package reconcile finds work that stopped without finishing and settles
// it: shards with no progress for a while are re-driven, and items left
// `submitted` (a crash between claim and outcome, or a send whose answer
// was lost) are resolved by asking the provider what became of their
// message key — delivered → confirmed; unknown (never accepted) → pending,
// to be sent again; no status look-up → left submitted under review for an
// operator. An item is never resent without that answer.
//
// A pass is bounded: it holds a lease in the store (passes never overlap),
// re-drives stale shards first (whatever settling does), recounts the
// final shards left dirty (an outside change died between its item writes
// and its fold, on a shard that gets no more turns), then settles
// submitted items page by page — the look-ups of a page run in parallel
// under a cap, shared round-robin across jobs, and each page's results are
// written before the next page is read — and stops before its deadline,
// leaving the cursor in the lease for the next pass to resume from. Last,
// it checks the counts of every job it touched against the items, status
// by status, recounting and alerting (CountsMismatch) when they differ.
package reconcile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
)

// LeaseName is the store lease every reconciler pass holds.
const LeaseName = "reconciler"

// Gauges receives the reconciler's measurements (metrics.EMF and the
// local Prometheus recorder implement it).
type Gauges interface {
	// OldestSubmittedAge is the age of the oldest item left submitted.
	OldestSubmittedAge(ctx context.Context, d time.Duration)
	// OldestStuckShardAge is how long the stalest running shard has gone
	// without progress, counted from its last advance, when that is over
	// StaleAfter (0: no shard is stuck).
	OldestStuckShardAge(ctx context.Context, d time.Duration)
}

// ItemExpirer marks finished jobs' item data for deletion after a
// retention period, a bounded amount per call (dynamostore, with the
// table's TTL; the local store keeps everything).
type ItemExpirer interface {
	ExpireFinishedItems(ctx context.Context, p store.ExpireItemsParams) (store.ExpireItemsResult, error)
}

// Reconciler runs one reconciliation pass per Run.
type Reconciler struct {
	Store    store.Store
	Queue    queue.Queue
	Provider provider.Provider
	// MsgCalls finds the provider message id of an item whose call was
	// accepted under one and confirmed later (nil: such items go to
	// review when the provider looks up only by its id).
	MsgCalls store.MsgCallStore
	Clock    clock.Clock
	Log      *slog.Logger
	// Alerts receives ItemsNeedReview, CountsMismatch and JobFinished
	// events (nil: none).
	Alerts alert.Publisher
	// Outcomes receives an ItemOutcomes event for the items a look-up or
	// a provider event made final (nil: none), as the sender's Outcomes
	// does for the items its calls made final.
	Outcomes alert.Publisher
	// Items reads the items a provider event settles, for their outcomes
	// (nil: their shard's submitted items are listed instead).
	Items store.ItemGetter
	// Gauges receives the oldest-submitted and oldest-stuck-shard ages
	// (nil: none).
	Gauges Gauges
	// Expirer, with Retention, marks the item data of finished jobs for
	// deletion Retention after they finished, at most ExpireBatch records
	// a pass (default 500) (nil: data is kept).
	Expirer     ItemExpirer
	Retention   time.Duration
	ExpireBatch int
	// StaleAfter: a running shard without progress for this long is
	// re-driven (default 2 min).
	StaleAfter time.Duration
	// SettleAfter: an item submitted this long ago is looked up. It must be
	// longer than the provider's response timeout, so an item whose call is
	// still in flight is never looked up (default 2 min).
	SettleAfter time.Duration
	// PageSize is how many submitted items a page lists (default 200).
	PageSize int
	// DirtyPerPass bounds how many dirty final shards a pass recounts
	// (default 100); the rest wait for the next pass.
	DirtyPerPass int
	// Lookups is how many status look-ups run at once (default 64: with
	// 200 ms look-ups, 320 a second).
	Lookups int
	// PassBudget bounds how long one pass settles before it stops and
	// leaves the rest to the next (default 90 s); a pass also stops
	// SafetyMargin before its context's deadline (the Lambda timeout).
	PassBudget time.Duration
	// SafetyMargin is kept free before the context's deadline (default
	// 15 s): enough to write the page in hand and release the lease.
	SafetyMargin time.Duration
	// LeaseFor is how long a pass holds the lease if it dies without
	// releasing it (default 5 min; longer than any pass).
	LeaseFor time.Duration
	// Holder names this reconciler in the lease (default: random).
	Holder string
	// StagingTTL: a staged job not started this long after its creation
	// is cancelled and its parts discarded (default DefaultStagingTTL).
	StagingTTL time.Duration
	// Plans is the planning watchdog of starting jobs (nil: none):
	// planning without progress for StaleAfter is sent again, at most
	// MaxPlanRepairs times (default DefaultMaxPlanRepairs), then the job
	// fails.
	Plans          PlanWatchdog
	MaxPlanRepairs int

	once   sync.Once
	holder string
	runs   atomic.Int64
}

// Report says what a pass did.
type Report struct {
	Confirmed    int  // submitted items found delivered
	Repended     int  // submitted items the provider never accepted, to be sent again (or abandoned, job cancelled)
	UnderReview  int  // submitted items without a status look-up
	LookupFailed int  // look-ups that failed (retried next pass)
	Redriven     int  // shards re-driven
	Swept        int  // dirty final shards recounted and their mark cleared
	Mismatches   int  // shards whose counts differed from their items (recounted)
	Pages        int  // pages of submitted items settled
	Stopped      bool // the pass stopped at its deadline; the next resumes
	Skipped      bool // another pass holds the lease: nothing done
	Expired      int  // staging jobs cancelled: not started within StagingTTL
	PlansResent  int  // starting jobs whose planning stopped: message sent again
	PlansFailed  int  // starting jobs whose planning failed after every repair
	// OldestSubmitted is the age of the oldest item left submitted after
	// the pass (0 when none).
	OldestSubmitted time.Duration
	// OldestStuck is how long the stalest shard re-driven by the pass had
	// gone without progress (0 when none was stale).
	OldestStuck time.Duration
	// ItemRecordsExpired counts item records of finished jobs given their
	// expiry.
	ItemRecordsExpired int
}

// Run does one pass.
func (r *Reconciler) Run(ctx context.Context) (Report, error) {
	var rep Report
	start := r.Clock.Now()
	stopAt := start.Add(durOr(r.PassBudget, 90*time.Second))
	if dl, ok := ctx.Deadline(); ok {
		if end := dl.Add(-durOr(r.SafetyMargin, 15*time.Second)); end.Before(stopAt) {
			stopAt = end
		}
	}
	holder := fmt.Sprintf("%s-%d", r.holderName(), r.runs.Add(1))
	lease, err := r.Store.AcquireLease(ctx, store.AcquireLeaseParams{
		Name: LeaseName, Holder: holder, Now: start, Until: start.Add(durOr(r.LeaseFor, 5*time.Minute)),
	})
	if errors.Is(err, store.ErrConflict) {
		r.log().Info("another reconciliation pass is running; skipping")
		return Report{Skipped: true}, nil
	}
	if err != nil {
		return rep, fmt.Errorf("acquire the reconciler lease: %w", err)
	}
	cursor := lease.Cursor
	touched := map[string]bool{}
	// Stale shards first: re-driving is cheap and must not wait for a
	// settle that cannot finish.
	errRedrive := r.redrive(ctx, &rep, touched)
	errSweep := r.sweepDirty(ctx, &rep, touched)
	next, errSettle := r.settle(ctx, &rep, touched, cursor, stopAt)
	if errSettle == nil {
		cursor = next
	}
	errCheck := r.checkJobs(ctx, &rep, touched)
	errExpire := r.expireStaging(ctx, &rep)
	errPlans := r.watchStarting(ctx, &rep)
	errRetain := r.expireItems(ctx, &rep, stopAt)
	r.measureOldest(ctx, &rep)
	// Release even when ctx is done: the next pass need not wait for the
	// lease to expire.
	errRelease := r.Store.ReleaseLease(context.WithoutCancel(ctx), store.ReleaseLeaseParams{Name: LeaseName, Holder: holder, Cursor: cursor})
	if errRelease != nil {
		errRelease = fmt.Errorf("release the reconciler lease: %w", errRelease)
	}
	if rep.Confirmed+rep.Repended+rep.UnderReview+rep.Redriven+rep.Swept+rep.Mismatches+rep.LookupFailed > 0 || rep.Stopped {
		r.log().Info("reconciled", slog.Int("confirmed", rep.Confirmed), slog.Int("repended", rep.Repended),
			slog.Int("under_review", rep.UnderReview), slog.Int("lookup_failed", rep.LookupFailed), slog.Int("redriven", rep.Redriven),
			slog.Int("swept", rep.Swept), slog.Int("mismatches", rep.Mismatches), slog.Int("pages", rep.Pages), slog.Bool("stopped", rep.Stopped),
			slog.Duration("oldest_submitted", rep.OldestSubmitted))
	}
	return rep, errors.Join(errRedrive, errSweep, errSettle, errCheck, errExpire, errPlans, errRetain, errRelease)
}

func (r *Reconciler) holderName() string {
	r.once.Do(func() {
		r.holder = r.Holder
		if r.holder == "" {
			b := make([]byte, 8)
			_, _ = rand.Read(b)
			r.holder = "reconciler-" + hex.EncodeToString(b)
		}
	})
	return r.holder
}

func (r *Reconciler) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

func durOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func intOr(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

type shardKey struct {
	job   string
	shard int
}

// lookup is one submitted item and what its look-up said.
type lookup struct {
	it     store.Item
	status provider.Status
	err    error
	skip   bool // already under review: no look-up
	// msgID is the provider's message id it was looked up by (""
	// none): a confirmed item keeps it.
	msgID string
}

// settle resolves items left submitted, page by page from cursor, until
// the listing ends (next cursor "") or stopAt; it returns the cursor to
// resume from.
func (r *Reconciler) settle(ctx context.Context, rep *Report, touched map[string]bool, cursor string, stopAt time.Time) (string, error) {
	before := r.Clock.Now().Add(-durOr(r.SettleAfter, 2*time.Minute))
	kicked := map[shardKey]bool{}
	for {
		if ctx.Err() != nil || !r.Clock.Now().Before(stopAt) {
			rep.Stopped = true
			return cursor, ctx.Err()
		}
		page, err := r.Store.ListSubmittedItems(ctx, store.ListSubmittedItemsParams{SubmittedBefore: before, Cursor: cursor, Limit: intOr(r.PageSize, 200)})
		if err != nil {
			return cursor, fmt.Errorf("list submitted items: %w", err)
		}
		if len(page.Items) > 0 {
			results := r.lookUp(ctx, fairOrder(page.Items))
			if err := r.writePage(ctx, rep, touched, kicked, results); err != nil {
				return cursor, err
			}
			rep.Pages++
		}
		cursor = page.NextCursor
		if cursor == "" {
			return "", nil
		}
	}
}

// fairOrder deals a page's items round-robin across jobs, so that with a
// cap on look-ups in flight no job waits for another's whole backlog.
func fairOrder(items []store.Item) []store.Item {
	var jobs []string
	by := map[string][]store.Item{}
	for _, it := range items {
		if _, ok := by[it.JobID]; !ok {
			jobs = append(jobs, it.JobID)
		}
		by[it.JobID] = append(by[it.JobID], it)
	}
	if len(jobs) == 1 {
		return items
	}
	out := make([]store.Item, 0, len(items))
	for len(out) < len(items) {
		for _, j := range jobs {
			if q := by[j]; len(q) > 0 {
				out = append(out, q[0])
				by[j] = q[1:]
			}
		}
	}
	return out
}

// lookUp asks the provider about every item, at most Lookups at once.
func (r *Reconciler) lookUp(ctx context.Context, items []store.Item) []lookup {
	out := make([]lookup, len(items))
	ids := &msgIDs{store: r.MsgCalls, jobs: map[string]map[msgSlot]string{}}
	sem := make(chan struct{}, intOr(r.Lookups, 64))
	var wg sync.WaitGroup
	for i, it := range items {
		out[i].it = it
		if store.UnderReview(it) {
			out[i].skip = true
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			req := provider.StatusRequest{Account: it.Account, Key: sender.MessageKey(it.JobID, it.Seq), MsgID: it.MsgID}
			out[i].status, out[i].err = r.Provider.Status(ctx, req)
			if errors.Is(out[i].err, provider.ErrStatusUnsupported) && req.MsgID == "" {
				// A provider that looks up by its own message id: ask
				// again with the id the call was accepted under.
				id, err := ids.of(ctx, it)
				switch {
				case err != nil:
					out[i].err = err
				case id != "":
					req.MsgID, out[i].msgID = id, id
					out[i].status, out[i].err = r.Provider.Status(ctx, req)
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// jobState caches what a page needs to know of a job.
type jobState struct {
	tenant    string
	cancelled bool
}

// writePage records the outcomes of one page of look-ups, shard by shard.
func (r *Reconciler) writePage(ctx context.Context, rep *Report, touched map[string]bool, kicked map[shardKey]bool, results []lookup) error {
	now := r.Clock.Now()
	jobs := map[string]jobState{}
	job := func(id string) (jobState, error) {
		if st, ok := jobs[id]; ok {
			return st, nil
		}
		v, err := r.Store.GetJob(ctx, id)
		if err != nil {
			return jobState{}, fmt.Errorf("read job %s: %w", id, err)
		}
		st := jobState{tenant: v.Job.Tenant, cancelled: v.Job.Status == store.JobCancelled}
		jobs[id] = st
		return st, nil
	}
	updates := map[shardKey][]store.ItemUpdate{}
	var order []shardKey
	review := map[string]int{}
	looked := map[itemKey]store.Item{}
	for _, l := range results {
		if l.skip {
			continue
		}
		it := l.it
		looked[itemKey{shardKey{it.JobID, it.Shard}, it.Seq}] = it
		u := store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: it.ClaimID}
		switch {
		case errors.Is(l.err, provider.ErrStatusUnsupported):
			u.To = store.ItemSubmitted
			u.Error = &store.ItemError{Category: store.CategoryUncertain, Code: store.CodeReview,
				Message: "sent without a confirmed answer and the provider has no status look-up: resolve by hand"}
			rep.UnderReview++
			review[it.JobID]++
		case l.err != nil:
			rep.LookupFailed++
			r.log().Warn("status look-up failed; will retry", slog.String("job", it.JobID), slog.Int64("seq", it.Seq), slog.Any("err", l.err))
			continue
		case l.status == provider.StatusDelivered:
			u.To, u.MsgID = store.ItemConfirmed, l.msgID
			rep.Confirmed++
		default:
			st, err := job(it.JobID)
			if err != nil {
				return err
			}
			rep.Repended++
			if st.cancelled {
				// Never delivered, and its job was cancelled: abandon it.
				u.To = store.ItemAbandoned
				u.Error = &store.ItemError{Category: store.CategoryCancelled, Message: "job cancelled; the provider never received it"}
				break
			}
			// The provider never accepted it: safe to send again. The
			// error must not stay `uncertain` on a pending item (a later
			// claim would count it as a failure again).
			u.To, u.NextAttemptAt = store.ItemPending, now
			u.Error = &store.ItemError{Category: store.CategoryRetryable, Code: "unknown",
				Message: "sent without an answer, and the provider has no record of it: sending again"}
		}
		k := shardKey{it.JobID, it.Shard}
		if _, ok := updates[k]; !ok {
			order = append(order, k)
		}
		updates[k] = append(updates[k], u)
	}
	for _, k := range order {
		ups := updates[k]
		for start := 0; start < len(ups); start += store.MaxPutItems {
			chunk := ups[start:min(start+store.MaxPutItems, len(ups))]
			var publish func(rejected []int64) error
			if r.Outcomes != nil {
				st, err := job(k.job)
				if err != nil {
					return err
				}
				publish = func(rejected []int64) error {
					return r.publishOutcomes(ctx, st.tenant, k.job, chunk, rejected, func(seq int64) (store.Item, bool) {
						it, ok := looked[itemKey{k, seq}]
						return it, ok
					}, now)
				}
			}
			repended, _, err := r.apply(ctx, k, chunk, now, publish)
			if err != nil {
				return err
			}
			if len(repended) > 0 {
				if err := r.afterRepend(ctx, k, repended, now); err != nil {
					return err
				}
			}
		}
		touched[k.job] = true
		if !kicked[k] {
			kicked[k] = true
			if _, _, err := r.kick(ctx, k.job, k.shard); err != nil {
				return err
			}
		}
	}
	for jobID, n := range review {
		st, err := job(jobID)
		if err != nil {
			return err
		}
		alert.Emit(ctx, r.Alerts, r.log(), alert.Event{Type: alert.ItemsNeedReview, Tenant: st.tenant, Time: now,
			Detail: alert.ItemsNeedReviewDetail{JobID: jobID, Count: n}})
	}
	return nil
}

// itemKey names an item across jobs.
type itemKey struct {
	shard shardKey
	seq   int64
}

// apply writes one chunk of item updates of a shard, marking the shard
// dirty first so that a crash before the fold is repaired by a recount,
// publishes the outcomes it recorded (publish, when not nil, given the
// updates the store rejected) before it folds, and returns the seqs it
// moved to pending. The mark also counts the change in the shard's
// OutcomesOutside, and only the fold ends it: should the process die
// before publishing, or the publish fail (the fold is then left to a
// recount and the shard stays dirty), the shard's next turn, or the sweep
// of dirty final shards, publishes them again.
func (r *Reconciler) apply(ctx context.Context, k shardKey, ups []store.ItemUpdate, now time.Time,
	publish func(rejected []int64) error) (repended, rejected []int64, err error) {
	sh, err := store.BeginOutsideTurn(ctx, r.Store, k.job, k.shard)
	if err != nil {
		return nil, nil, fmt.Errorf("mark shard %s/%d dirty: %w", k.job, k.shard, err)
	}
	res, err := r.Store.UpdateItems(ctx, store.UpdateItemsParams{JobID: k.job, Index: k.shard, Updates: ups, At: now})
	if err != nil {
		r.repairCounts(ctx, k)
		return nil, nil, fmt.Errorf("settle items of shard %s/%d: %w", k.job, k.shard, err)
	}
	if publish != nil {
		if err := publish(res.Rejected); err != nil {
			r.log().Error("publish outcomes; the shard stays dirty to publish them again",
				slog.String("job", k.job), slog.Int("shard", k.shard), slog.Any("err", err))
			r.repairCounts(ctx, k)
			return rependedOf(ups, res.Rejected), res.Rejected, nil
		}
	}
	if _, err := store.FoldOutsideTurn(ctx, r.Store, sh, res.Delta, res.FailuresDelta); err != nil {
		r.repairCounts(ctx, k)
		return nil, nil, fmt.Errorf("fold settled counts of shard %s/%d: %w", k.job, k.shard, err)
	}
	return rependedOf(ups, res.Rejected), res.Rejected, nil
}

// rependedOf is the seqs ups moved to pending (those not rejected).
func rependedOf(ups []store.ItemUpdate, rejected []int64) []int64 {
	var seqs []int64
	for _, u := range ups {
		if u.To == store.ItemPending && !slices.Contains(rejected, u.Seq) {
			seqs = append(seqs, u.Seq)
		}
	}
	return seqs
}

// repairCounts makes a shard's counts true from its items after a settle
// failed between marking the shard dirty and folding its counts: the item
// writes may have been applied although their answer was lost. A turn
// would recount the dirty shard at its start, but a shard that is final
// (its job cancelled while items awaited the look-up) gets no more turns,
// and the next pass does not look at items it already settled. Best
// effort: a store that keeps failing leaves the shard dirty.
func (r *Reconciler) repairCounts(ctx context.Context, k shardKey) {
	if _, err := r.Store.RecountShard(context.WithoutCancel(ctx), k.job, k.shard); err != nil {
		r.log().Warn("cannot recount a shard after a failed settle; it stays dirty",
			slog.String("job", k.job), slog.Int("shard", k.shard), slog.Any("err", err))
	}
}

// afterRepend gives back the budget the re-pended items' lost sends had
// reserved (they reserve again when claimed), then makes sure they are
// sent, or abandoned if the job was cancelled (sender.Repended).
func (r *Reconciler) afterRepend(ctx context.Context, k shardKey, seqs []int64, now time.Time) error {
	v, err := r.Store.GetJob(ctx, k.job)
	if err != nil {
		return fmt.Errorf("read job %s: %w", k.job, err)
	}
	if v.Job.Budget > 0 && v.Job.BudgetUsed > 0 {
		// Giving back may lift a budget pause that counted these sends.
		if err := sender.GiveBackBudget(ctx, r.Store, r.Queue, k.job, int64(len(seqs)), now); err != nil {
			return fmt.Errorf("give back the budget of re-pended items of %s: %w", k.job, err)
		}
	}
	// The job may have been cancelled (its senders may already have
	// abandoned its pending items and finished its shards) or finished
	// while the page was being settled: abandon them, or run the shard
	// again.
	return sender.Repended(ctx, r.Store, r.Queue, r.Alerts, r.log(), k.job, []int{k.shard}, now)
}

// redrive re-enqueues running shards of running jobs that made no progress.
func (r *Reconciler) redrive(ctx context.Context, rep *Report, touched map[string]bool) error {
	before := r.Clock.Now().Add(-durOr(r.StaleAfter, 2*time.Minute))
	stale, err := r.Store.ListStaleShards(ctx, store.ListStaleShardsParams{Before: before, Limit: 1000})
	if err != nil {
		return fmt.Errorf("list stale shards: %w", err)
	}
	var errs []error
	now := r.Clock.Now()
	for _, ref := range stale {
		kicked, last, err := r.kick(ctx, ref.JobID, ref.Index)
		if err != nil {
			errs = append(errs, err) // one shard's trouble must not stop the others
			continue
		}
		touched[ref.JobID] = true
		if kicked {
			rep.Redriven++
			rep.OldestStuck = max(rep.OldestStuck, now.Sub(last))
		}
	}
	if r.Gauges != nil {
		r.Gauges.OldestStuckShardAge(ctx, rep.OldestStuck)
	}
	return errors.Join(errs...)
}

// expireItems marks finished jobs' item data for deletion, a bounded
// number of records per pass, when there is time left in it.
func (r *Reconciler) expireItems(ctx context.Context, rep *Report, stopAt time.Time) error {
	if r.Expirer == nil || r.Retention <= 0 || !r.Clock.Now().Before(stopAt) {
		return nil
	}
	res, err := r.Expirer.ExpireFinishedItems(ctx, store.ExpireItemsParams{Now: r.Clock.Now(), Retain: r.Retention, Limit: intOr(r.ExpireBatch, 500)})
	rep.ItemRecordsExpired = res.Records
	if err != nil {
		return fmt.Errorf("expire finished jobs' items: %w", err)
	}
	if res.Records > 0 {
		r.log().Info("finished jobs' items given their expiry", slog.Int("records", res.Records), slog.Int("jobs_done", res.Jobs),
			slog.Int("jobs_deferred", res.Deferred), slog.Bool("more", res.More), slog.Duration("retention", r.Retention))
	}
	return nil
}

// kick enqueues the next turn of a shard if its job is running and the
// shard is not finished, and reports whether it did. The turn number makes
// it a no-op when a turn is already queued or running (queue dedup, store
// turn fencing).
func (r *Reconciler) kick(ctx context.Context, jobID string, index int) (bool, time.Time, error) {
	view, err := r.Store.GetJob(ctx, jobID)
	if err != nil {
		return false, time.Time{}, fmt.Errorf("read job %s: %w", jobID, err)
	}
	if index >= len(view.Shards) {
		return false, time.Time{}, nil
	}
	sh := view.Shards[index]
	kicked, err := r.kickShard(ctx, view, sh)
	return kicked, sh.LastAdvancedAt, err
}

func (r *Reconciler) kickShard(ctx context.Context, view store.JobView, sh store.Shard) (bool, error) {
	jobID, index := view.Job.ID, sh.Index
	if view.Job.Status == store.JobCompleted || view.Job.Status == store.JobPartial || view.Job.Status == store.JobFailed {
		// Settled items re-opened a finished shard, or a change that
		// reopens the shard and then the job (a redrive) died between the
		// two, leaving a running shard in a finished job: run it again
		// (its turn recounts it and finishes it, and the job).
		if sh.Counts.Pending == 0 && sh.Status != store.ShardRunning {
			return false, nil
		}
		if _, err := r.Store.TransitionJob(ctx, store.TransitionJobParams{JobID: jobID, To: store.JobRunning, At: r.Clock.Now()}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
			return false, fmt.Errorf("reopen job %s: %w", jobID, err)
		}
		view.Job.Status = store.JobRunning
	}
	if store.ShardFinal(sh.Status) && sh.Status != store.ShardCancelled && sh.Counts.Pending > 0 {
		if _, err := r.Store.TransitionShard(ctx, store.TransitionShardParams{JobID: jobID, Index: index, To: store.ShardRunning, At: r.Clock.Now()}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
			return false, fmt.Errorf("reopen shard %s/%d: %w", jobID, index, err)
		}
		sh.Status = store.ShardRunning
	}
	if view.Job.Status != store.JobRunning && view.Job.Status != store.JobCancelled {
		return false, nil
	}
	if store.ShardFinal(sh.Status) {
		return false, nil
	}
	return true, dispatch.Send(ctx, r.Queue, dispatch.Turn{JobID: jobID, Shard: index, Turn: sh.Turn + 1})
}

// mismatch reports a shard whose stored counts (sh) differed from its
// items (the recount rc, which has fixed them). view is the job as read
// before the recount: the job's counts now are its counts with the shard's
// stored ones replaced by the recount's, so Counted falls short of Total
// by the items missing.
func (r *Reconciler) mismatch(ctx context.Context, rep *Report, view store.JobView, sh, rc store.Shard) {
	rep.Mismatches++
	r.log().Error("shard counts did not match its items; recounted", slog.String("job", view.Job.ID), slog.Int("shard", sh.Index),
		slog.Any("counts", sh.Counts), slog.Any("items", rc.Counts))
	index := sh.Index
	stored, items := alert.Counts(sh.Counts), alert.Counts(rc.Counts)
	alert.Emit(ctx, r.Alerts, r.log(), alert.Event{Type: alert.CountsMismatch, Tenant: view.Job.Tenant, Time: r.Clock.Now(),
		Detail: alert.CountsMismatchDetail{JobID: view.Job.ID, Total: view.Job.Total, Counted: view.Counts().Total() - sh.Counts.Total() + rc.Counts.Total(),
			Shard: &index, Stored: &stored, Items: &items}})
}

// checkJobs checks the counts of every touched job and finishes the jobs
// whose shards are all done.
func (r *Reconciler) checkJobs(ctx context.Context, rep *Report, touched map[string]bool) error {
	ids := make([]string, 0, len(touched))
	for id := range touched {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var errs []error
	for _, id := range ids {
		if err := r.checkJob(ctx, id, rep); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkJob compares, status by status, the counts of each of a job's
// shards that no turn is working (not dirty) with a recount of its items;
// when they differ the recount has fixed them, and CountsMismatch is
// published. Then the job is finished if all its shards are done.
func (r *Reconciler) checkJob(ctx context.Context, jobID string, rep *Report) error {
	view, err := r.Store.GetJob(ctx, jobID)
	if err != nil {
		return fmt.Errorf("read job %s: %w", jobID, err)
	}
	for _, sh := range view.Shards {
		if sh.Dirty {
			continue // a turn (or an outside change) is folding; its counts lag by design
		}
		rc, err := r.Store.RecountShard(ctx, jobID, sh.Index)
		if err != nil {
			return fmt.Errorf("recount shard %s/%d: %w", jobID, sh.Index, err)
		}
		if rc.Dirty || rc.Epoch != sh.Epoch+1 || rc.Counts == sh.Counts {
			continue // unchanged, or something moved meanwhile: nothing to conclude
		}
		r.mismatch(ctx, rep, view, sh, rc)
	}
	return sender.FinishJob(ctx, r.Store, r.Alerts, r.log(), jobID, r.Clock.Now())
}

// measureOldest reads the oldest item left submitted and publishes its age.
func (r *Reconciler) measureOldest(ctx context.Context, rep *Report) {
	now := r.Clock.Now()
	page, err := r.Store.ListSubmittedItems(ctx, store.ListSubmittedItemsParams{SubmittedBefore: now.Add(time.Hour), Limit: 1})
	if err != nil {
		r.log().Warn("cannot read the oldest submitted item", slog.Any("err", err))
		return
	}
	if len(page.Items) > 0 {
		rep.OldestSubmitted = max(0, now.Sub(page.Items[0].SubmittedAt))
	}
	if r.Gauges != nil {
		r.Gauges.OldestSubmittedAge(ctx, rep.OldestSubmitted)
	}
}
