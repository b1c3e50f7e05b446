// Package control carries out operators' commands on a running job: pause,
// resume, cancel and live limit changes. Every command is a conditional
// status change in the store (a forbidden one is an error and changes
// nothing); senders notice it at their next item boundary. Resume and
// cancel also enqueue a turn for every unfinished shard, so a paused job
// starts again and a cancelled one abandons its remaining items promptly.
package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
)

// ErrNotAllowed: the command does not apply to the job's current status
// (e.g. resume a running job, cancel a finished one).
var ErrNotAllowed = errors.New("not allowed in the job's current status")

// Controller runs operator commands.
type Controller struct {
	Store store.Store
	Queue queue.Queue
	Clock clock.Clock
	// Alerts receives JobPaused for manual pauses (nil: none).
	Alerts alert.Publisher
	Log    *slog.Logger
}

func (c *Controller) logger() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}

// Pause stops a running job at the next item boundary (resumable).
func (c *Controller) Pause(ctx context.Context, jobID string) (store.JobView, error) {
	job, err := c.Store.TransitionJob(ctx, store.TransitionJobParams{
		JobID: jobID, From: []store.JobStatus{store.JobRunning}, To: store.JobPaused,
		PauseReason: store.PauseManual, At: c.Clock.Now(),
	})
	if err != nil {
		return store.JobView{}, mapErr(err)
	}
	alert.Emit(ctx, c.Alerts, c.logger(), alert.Event{Type: alert.JobPaused, Tenant: job.Tenant, Time: c.Clock.Now(),
		Detail: alert.JobPausedDetail{JobID: jobID, Reason: string(store.PauseManual)}})
	return c.Store.GetJob(ctx, jobID)
}

// Resume continues a paused job (whatever paused it: manual, budget — raise
// the budget first — or breaker) and resumes its breaker-paused shards.
func (c *Controller) Resume(ctx context.Context, jobID string) (store.JobView, error) {
	now := c.Clock.Now()
	tp := store.TransitionJobParams{JobID: jobID, From: []store.JobStatus{store.JobPaused}, To: store.JobRunning, At: now}
	before, err := c.Store.GetJob(ctx, jobID)
	if err != nil {
		return store.JobView{}, mapErr(err)
	}
	if before.Job.Status == store.JobPaused && before.Job.PauseReason == store.PauseCanary {
		// Resuming a canary pause approves the canary: the job sends the
		// rest, and shows the canary's results as they were.
		tp.ApproveCanary = true
		tp.CanaryConfirmed, tp.CanaryFailed = store.CanaryResults(before)
	}
	if _, err := c.Store.TransitionJob(ctx, tp); err != nil {
		return store.JobView{}, mapErr(err)
	}
	view, err := c.Store.GetJob(ctx, jobID)
	if err != nil {
		return store.JobView{}, err
	}
	for _, sh := range view.Shards {
		if sh.Status == store.ShardPaused {
			if _, err := c.Store.TransitionShard(ctx, store.TransitionShardParams{
				JobID: jobID, Index: sh.Index, From: []store.ShardStatus{store.ShardPaused}, To: store.ShardRunning, At: now,
			}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
				return store.JobView{}, fmt.Errorf("resume shard %d: %w", sh.Index, err)
			}
		}
	}
	if err := c.kickAll(ctx, view); err != nil {
		return store.JobView{}, err
	}
	// Shards that finished while the job was paused could not end it, and
	// resume kicks no finished shard: end it here when nothing is left.
	if err := sender.FinishJob(ctx, c.Store, c.Alerts, c.logger(), jobID, now); err != nil {
		return store.JobView{}, err
	}
	return c.Store.GetJob(ctx, jobID)
}

// Cancel abandons a job's remaining items, irreversibly; nothing already
// sent is undone. Items in flight finish and are recorded.
func (c *Controller) Cancel(ctx context.Context, jobID string) (store.JobView, error) {
	job, err := c.Store.TransitionJob(ctx, store.TransitionJobParams{
		JobID: jobID, From: []store.JobStatus{store.JobRunning, store.JobPaused, store.JobStaging, store.JobStarting},
		To: store.JobCancelled, At: c.Clock.Now(),
	})
	if err != nil {
		return store.JobView{}, mapErr(err)
	}
	view, err := c.Store.GetJob(ctx, jobID)
	if err != nil {
		return store.JobView{}, err
	}
	alert.Emit(ctx, c.Alerts, c.logger(), alert.Event{Type: alert.JobFinished, Tenant: job.Tenant, Time: c.Clock.Now(),
		Detail: alert.JobFinishedDetail{JobID: jobID, Name: job.Name, Status: string(store.JobCancelled),
			Counts: alert.Counts(view.Counts()), Failures: view.Failures()}})
	if err := c.kickAll(ctx, view); err != nil {
		return store.JobView{}, err
	}
	return view, nil
}

// UpdateLimits changes a job's rate cap and/or budget; senders apply it at
// their next batch. A budget given to a job that had none counts the sends
// made so far. Raising the budget of a job paused for budget does not
// resume it: resume is the operator's confirmation. A job in a final
// status keeps its limits (ErrNotAllowed).
func (c *Controller) UpdateLimits(ctx context.Context, jobID string, ratePerSec *float64, budget *int64) (store.JobView, error) {
	if ratePerSec != nil && *ratePerSec < 0 || budget != nil && *budget < 0 {
		return store.JobView{}, fmt.Errorf("%w: rate and budget must be >= 0", store.ErrInvalidArgument)
	}
	view, err := c.Store.GetJob(ctx, jobID)
	if err != nil {
		return store.JobView{}, err
	}
	if store.JobFinal(view.Job.Status) {
		// A finished or cancelled job keeps its limits (the store refuses
		// too, atomically; this check also keeps the budget usage below
		// untouched).
		return store.JobView{}, fmt.Errorf("%w: job is %s", ErrNotAllowed, view.Job.Status)
	}
	if budget != nil && *budget > 0 {
		// A job without a budget does not count its sends against one;
		// when it gets one, the sends made so far count (every attempt
		// that reached the provider, as the senders count them).
		if view.Job.Budget == 0 && view.Job.BudgetUsed == 0 {
			var sent int64
			for _, sh := range view.Shards {
				sent += sh.Attempts
			}
			if sent > 0 {
				if _, err := c.Store.ReserveBudget(ctx, jobID, sent); err != nil {
					return store.JobView{}, fmt.Errorf("count earlier sends against the new budget: %w", err)
				}
			}
		}
	}
	if _, err := c.Store.UpdateJobLimits(ctx, store.UpdateJobLimitsParams{JobID: jobID, RatePerSec: ratePerSec, Budget: budget}); err != nil {
		return store.JobView{}, mapErr(err)
	}
	return c.Store.GetJob(ctx, jobID)
}

func (c *Controller) kickAll(ctx context.Context, view store.JobView) error {
	var turns []dispatch.Turn
	for _, sh := range view.Shards {
		if !store.ShardFinal(sh.Status) {
			turns = append(turns, dispatch.Turn{JobID: view.Job.ID, Shard: sh.Index, Turn: sh.Turn + 1})
		}
	}
	return dispatch.SendTurns(ctx, c.Queue, turns)
}

// repairCounts makes a shard's counts true from its items after an
// operator's change failed between marking the shard dirty and folding its
// counts (the item write may have been applied with its answer lost). A
// running shard's next turn would recount it, but a final one (a cancelled
// job's, say) gets no more turns. Best effort: a store that keeps failing
// leaves the shard dirty.
func (c *Controller) repairCounts(ctx context.Context, jobID string, index int) {
	if _, err := c.Store.RecountShard(context.WithoutCancel(ctx), jobID, index); err != nil {
		c.logger().Warn("cannot recount a shard after a failed change; it stays dirty",
			slog.String("job", jobID), slog.Int("shard", index), slog.Any("err", err))
	}
}

func mapErr(err error) error {
	if errors.Is(err, store.ErrInvalidTransition) {
		return fmt.Errorf("%w: %w", ErrNotAllowed, err)
	}
	return err
}

// Redrivable reports whether failed items of a category may be redriven:
// exhausted retries and permanent refusals (after the operator fixed the
// cause). Abandoned items never are: cancel is irreversible.
func Redrivable(category string) bool {
	return category == store.CategoryExhausted || category == store.CategoryPermanent
}

// Redrive re-pends a job's failed items of one category with fresh
// attempts; they go out again through the normal rate-limited path. A
// finished job runs again. It returns how many items were re-pended.
func (c *Controller) Redrive(ctx context.Context, jobID, category string) (int, error) {
	if !Redrivable(category) {
		return 0, fmt.Errorf("%w: category %q cannot be redriven (exhausted or permanent)", store.ErrInvalidArgument, category)
	}
	view, err := c.Store.GetJob(ctx, jobID)
	if err != nil {
		return 0, err
	}
	if view.Job.Status == store.JobCancelled || view.Job.Status == store.JobCreating {
		return 0, fmt.Errorf("%w: job is %s", ErrNotAllowed, view.Job.Status)
	}
	now := c.Clock.Now()
	total := 0
	var shards []int
	for _, sh := range view.Shards {
		n, err := c.repend(ctx, jobID, sh.Index, store.ItemFailed, category, now)
		if n > 0 {
			total += n
			shards = append(shards, sh.Index)
		}
		if err != nil {
			return total, err
		}
	}
	if total == 0 {
		return 0, nil
	}
	// The job may have finished or been cancelled while the items were
	// re-pended: run it (and its finished shards) again, or abandon them.
	if err := sender.Repended(ctx, c.Store, c.Queue, c.Alerts, c.logger(), jobID, shards, now); err != nil {
		return total, fmt.Errorf("redrive: %w", err)
	}
	return total, nil
}

// repend moves a shard's items in status from with error category cat back
// to pending with fresh attempts, page by page, folding counts.
func (c *Controller) repend(ctx context.Context, jobID string, index int, from store.ItemStatus, cat string, now time.Time) (int, error) {
	n := 0
	err := store.WorkItems(ctx, c.Store, store.ListItemsParams{JobID: jobID, Status: from, Category: cat, Shard: &index, Limit: store.MaxPutItems},
		func(items []store.Item) (bool, bool, error) {
			// Dirty before the item writes: a crash before the fold is
			// repaired by a recount.
			sh, err := store.BeginOutsideTurn(ctx, c.Store, jobID, index)
			if err != nil {
				return false, false, err
			}
			// Run a finished shard and job again before their items go
			// back to pending: if this redrive dies before it finishes,
			// the shard is left running, and the reconciler re-drives it.
			if err := c.reopen(ctx, jobID, index, now); err != nil {
				return false, false, err
			}
			ups := make([]store.ItemUpdate, 0, len(items))
			for _, it := range items {
				ups = append(ups, store.ItemUpdate{
					Seq: it.Seq, From: from, To: store.ItemPending, ResetAttempts: true, NextAttemptAt: now,
					Error: &store.ItemError{Category: store.CategoryRetryable, Code: "redrive", Message: "redriven by an operator after: " + cat},
				})
			}
			res, err := c.Store.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: index, Updates: ups, At: now})
			if err != nil {
				c.repairCounts(ctx, jobID, index)
				return false, false, fmt.Errorf("redrive items: %w", err)
			}
			if _, err := store.FoldOutsideTurn(ctx, c.Store, sh, res.Delta, res.FailuresDelta); err != nil {
				c.repairCounts(ctx, jobID, index)
				return false, false, fmt.Errorf("fold redrive counts: %w", err)
			}
			n += len(ups) - len(res.Rejected)
			all := len(res.Rejected) == len(ups) // raced with someone else; nothing more we can move
			return !all, all, nil
		})
	return n, err
}

// reopen puts a finished (not cancelled) shard and its finished (partial
// or failed) job back to running.
func (c *Controller) reopen(ctx context.Context, jobID string, index int, now time.Time) error {
	if _, err := c.Store.TransitionShard(ctx, store.TransitionShardParams{
		JobID: jobID, Index: index, From: []store.ShardStatus{store.ShardCompleted, store.ShardFailed},
		To: store.ShardRunning, At: now,
	}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
		return fmt.Errorf("reopen shard %d: %w", index, err)
	}
	if _, err := c.Store.TransitionJob(ctx, store.TransitionJobParams{
		JobID: jobID, From: []store.JobStatus{store.JobPartial, store.JobFailed}, To: store.JobRunning, At: now,
	}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
		return fmt.Errorf("reopen job: %w", err)
	}
	return nil
}

// Resolution is an operator's verdict on an item under review.
type Resolution string

// Resolutions.
const (
	// Delivered: the operator checked that the message arrived.
	Delivered Resolution = "delivered"
	// Resend: the operator checked that it did not; send it again.
	Resend Resolution = "resend"
)

// ErrNotUnderReview: the item is not waiting for an operator.
var ErrNotUnderReview = errors.New("item is not under review")

// Resolve settles an item sent without a confirmed answer. Resend is
// allowed only for an item under review (store.UnderReview: the
// reconciler's look-up found no record of it, or the provider has no
// look-up and it waited past the settle delay): resending an item not yet
// looked up could deliver it twice. Delivered (a missed message at worst)
// is allowed for any submitted item of category uncertain.
func (c *Controller) Resolve(ctx context.Context, jobID string, seq int64, r Resolution) (store.Item, error) {
	if r != Delivered && r != Resend {
		return store.Item{}, fmt.Errorf("%w: outcome must be delivered or resend", store.ErrInvalidArgument)
	}
	it, err := c.findUncertain(ctx, jobID, seq)
	if err != nil {
		return store.Item{}, err
	}
	if r == Resend && !store.UnderReview(it) {
		return store.Item{}, fmt.Errorf("%w: its status has not been looked up yet; the reconciler settles it or puts it under review", ErrNotUnderReview)
	}
	now := c.Clock.Now()
	u := store.ItemUpdate{Seq: seq, From: store.ItemSubmitted, ClaimID: it.ClaimID, To: store.ItemConfirmed}
	if r == Resend {
		u.To, u.NextAttemptAt = store.ItemPending, now
		u.Error = &store.ItemError{Category: store.CategoryRetryable, Code: "resend", Message: "resend requested by an operator"}
		if view, err := c.Store.GetJob(ctx, jobID); err != nil {
			return store.Item{}, err
		} else if view.Job.Status == store.JobCancelled {
			// Not delivered, and the job was cancelled: nothing is resent.
			u.To, u.NextAttemptAt = store.ItemAbandoned, time.Time{}
			u.Error = &store.ItemError{Category: store.CategoryCancelled, Message: "job cancelled; not delivered, so not resent"}
		}
	}
	// Dirty before the item write: a crash before the fold is repaired by
	// a recount.
	sh, err := store.BeginOutsideTurn(ctx, c.Store, jobID, it.Shard)
	if err != nil {
		return store.Item{}, err
	}
	res, err := c.Store.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: it.Shard, Updates: []store.ItemUpdate{u}, At: now})
	if err != nil {
		c.repairCounts(ctx, jobID, it.Shard)
		return store.Item{}, err
	}
	if len(res.Rejected) > 0 {
		// Nothing changed; fold the empty delta to clear our mark.
		if _, err := store.FoldOutsideTurn(ctx, c.Store, sh, res.Delta, res.FailuresDelta); err != nil {
			c.repairCounts(ctx, jobID, it.Shard)
			return store.Item{}, err
		}
		return store.Item{}, fmt.Errorf("%w: it changed meanwhile", ErrNotUnderReview)
	}
	if _, err := store.FoldOutsideTurn(ctx, c.Store, sh, res.Delta, res.FailuresDelta); err != nil {
		c.repairCounts(ctx, jobID, it.Shard)
		return store.Item{}, err
	}
	if u.To == store.ItemPending {
		// The job may have finished or been cancelled meanwhile: run the
		// shard again, or abandon the item.
		if err := sender.Repended(ctx, c.Store, c.Queue, c.Alerts, c.logger(), jobID, []int{it.Shard}, now); err != nil {
			return store.Item{}, fmt.Errorf("resend: %w", err)
		}
		it.Status = u.To
		return it, nil
	}
	// The shard may be waiting only for this item: let it finish.
	view, err := c.Store.GetJob(ctx, jobID)
	if err != nil {
		return store.Item{}, err
	}
	if view.Job.Status == store.JobRunning || view.Job.Status == store.JobCancelled {
		s := view.Shards[it.Shard]
		if !store.ShardFinal(s.Status) {
			if err := dispatch.Send(ctx, c.Queue, dispatch.Turn{JobID: jobID, Shard: s.Index, Turn: s.Turn + 1}); err != nil {
				return store.Item{}, err
			}
		}
	}
	it.Status = u.To
	return it, nil
}

// findUncertain finds a submitted item of category uncertain.
func (c *Controller) findUncertain(ctx context.Context, jobID string, seq int64) (store.Item, error) {
	cursor := ""
	for {
		page, err := c.Store.ListItems(ctx, store.ListItemsParams{
			JobID: jobID, Status: store.ItemSubmitted, Category: store.CategoryUncertain, Cursor: cursor, Limit: 1000,
		})
		if err != nil {
			return store.Item{}, err
		}
		for _, it := range page.Items {
			if it.Seq == seq {
				return it, nil
			}
		}
		if page.NextCursor == "" {
			return store.Item{}, ErrNotUnderReview
		}
		cursor = page.NextCursor
	}
}
