// Package reconcile finds work that stopped without finishing and settles
// it: shards with no progress for a while are re-driven, and items left
// `submitted` (a crash between claim and outcome, or a send whose answer
// was lost) are resolved by asking the provider what became of their
// message key — delivered → confirmed; unknown (never accepted) → pending,
// to be sent again; no status look-up → left submitted under review for an
// operator. An item is never resent without that answer.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
)

// Reconciler runs one reconciliation pass per Run.
type Reconciler struct {
	Store    store.Store
	Queue    queue.Queue
	Provider provider.Provider
	Clock    clock.Clock
	Log      *slog.Logger
	// Alerts receives ItemsNeedReview, CountsMismatch and JobFinished
	// events (nil: none).
	Alerts alert.Publisher
	// StaleAfter: a running shard without progress for this long is
	// re-driven (default 2 min).
	StaleAfter time.Duration
	// SettleAfter: an item submitted this long ago is looked up. It must be
	// longer than the provider's response timeout, so an item whose call is
	// still in flight is never looked up (default 2 min).
	SettleAfter time.Duration
}

// Report says what a pass did.
type Report struct {
	Confirmed   int // submitted items found delivered
	Repended    int // submitted items the provider never accepted, to be sent again
	UnderReview int // submitted items without a status look-up
	Redriven    int // shards re-driven
	Mismatches  int // jobs whose counts do not add up to their total
}

// Run does one pass.
func (r *Reconciler) Run(ctx context.Context) (Report, error) {
	var rep Report
	touched := map[string]bool{}
	if err := r.settle(ctx, &rep, touched); err != nil {
		return rep, err
	}
	if err := r.redrive(ctx, &rep, touched); err != nil {
		return rep, err
	}
	for jobID := range touched {
		if err := r.checkJob(ctx, jobID, &rep); err != nil {
			return rep, err
		}
	}
	if rep != (Report{}) {
		r.log().Info("reconciled", slog.Int("confirmed", rep.Confirmed), slog.Int("repended", rep.Repended),
			slog.Int("under_review", rep.UnderReview), slog.Int("redriven", rep.Redriven), slog.Int("mismatches", rep.Mismatches))
	}
	return rep, nil
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

type shardKey struct {
	job   string
	shard int
}

// settle resolves items left submitted.
func (r *Reconciler) settle(ctx context.Context, rep *Report, touched map[string]bool) error {
	now := r.Clock.Now()
	before := now.Add(-durOr(r.SettleAfter, 2*time.Minute))
	updates := map[shardKey][]store.ItemUpdate{}
	review := map[string]int{} // job → items newly under review
	cancelled := map[string]bool{}
	isCancelled := func(jobID string) (bool, error) {
		if c, ok := cancelled[jobID]; ok {
			return c, nil
		}
		v, err := r.Store.GetJob(ctx, jobID)
		if err != nil {
			return false, fmt.Errorf("read job %s: %w", jobID, err)
		}
		cancelled[jobID] = v.Job.Status == store.JobCancelled
		return cancelled[jobID], nil
	}
	cursor := ""
	for {
		page, err := r.Store.ListSubmittedItems(ctx, store.ListSubmittedItemsParams{SubmittedBefore: before, Cursor: cursor, Limit: 200})
		if err != nil {
			return fmt.Errorf("list submitted items: %w", err)
		}
		for _, it := range page.Items {
			st, err := r.Provider.Status(ctx, provider.StatusRequest{Account: it.Account, Key: sender.MessageKey(it.JobID, it.Seq)})
			u := store.ItemUpdate{Seq: it.Seq, From: store.ItemSubmitted, ClaimID: it.ClaimID}
			switch {
			case errors.Is(err, provider.ErrStatusUnsupported):
				if it.Error != nil && it.Error.Category == store.CategoryUncertain && it.Error.Code == store.CodeReview {
					continue // already under review
				}
				u.To = store.ItemSubmitted
				u.Error = &store.ItemError{Category: store.CategoryUncertain, Code: store.CodeReview,
					Message: "sent without a confirmed answer and the provider has no status look-up: resolve by hand"}
				rep.UnderReview++
				review[it.JobID]++
			case err != nil:
				r.log().Warn("status look-up failed; will retry", slog.String("job", it.JobID), slog.Int64("seq", it.Seq), slog.Any("err", err))
				continue
			case st == provider.StatusDelivered:
				u.To = store.ItemConfirmed
				rep.Confirmed++
			default:
				c, err := isCancelled(it.JobID)
				if err != nil {
					return err
				}
				if c {
					// Never delivered, and its job was cancelled: abandon it.
					u.To = store.ItemAbandoned
					u.Error = &store.ItemError{Category: store.CategoryCancelled, Message: "job cancelled; the provider never received it"}
					rep.Repended++
					break
				}
				// The provider never accepted it: safe to send again. The
				// error must not stay `uncertain` on a pending item (a
				// later claim would count it as a failure again).
				u.To, u.NextAttemptAt = store.ItemPending, now
				u.Error = &store.ItemError{Category: store.CategoryRetryable, Code: "unknown",
					Message: "sent without an answer, and the provider has no record of it: sending again"}
				rep.Repended++
			}
			k := shardKey{it.JobID, it.Shard}
			updates[k] = append(updates[k], u)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	for k, ups := range updates {
		for start := 0; start < len(ups); start += store.MaxPutItems {
			chunk := ups[start:min(start+store.MaxPutItems, len(ups))]
			sh, err := r.Store.GetShard(ctx, k.job, k.shard) // the counts our delta is relative to
			if err != nil {
				return fmt.Errorf("read shard %s/%d: %w", k.job, k.shard, err)
			}
			res, err := r.Store.UpdateItems(ctx, store.UpdateItemsParams{JobID: k.job, Index: k.shard, Updates: chunk, At: now})
			if err != nil {
				return fmt.Errorf("settle items of shard %s/%d: %w", k.job, k.shard, err)
			}
			if _, err := store.FoldOutsideTurn(ctx, r.Store, sh, res.Delta, res.FailuresDelta); err != nil {
				return fmt.Errorf("fold settled counts of shard %s/%d: %w", k.job, k.shard, err)
			}
		}
		touched[k.job] = true
		if _, err := r.kick(ctx, k.job, k.shard); err != nil {
			return err
		}
	}
	for jobID, n := range review {
		v, err := r.Store.GetJob(ctx, jobID)
		if err != nil {
			return fmt.Errorf("read job %s: %w", jobID, err)
		}
		alert.Emit(ctx, r.Alerts, r.log(), alert.Event{Type: alert.ItemsNeedReview, Tenant: v.Job.Tenant, Time: now,
			Detail: alert.ItemsNeedReviewDetail{JobID: jobID, Count: n}})
	}
	return nil
}

// redrive re-enqueues running shards of running jobs that made no progress.
func (r *Reconciler) redrive(ctx context.Context, rep *Report, touched map[string]bool) error {
	before := r.Clock.Now().Add(-durOr(r.StaleAfter, 2*time.Minute))
	stale, err := r.Store.ListStaleShards(ctx, store.ListStaleShardsParams{Before: before, Limit: 1000})
	if err != nil {
		return fmt.Errorf("list stale shards: %w", err)
	}
	for _, ref := range stale {
		kicked, err := r.kick(ctx, ref.JobID, ref.Index)
		if err != nil {
			return err
		}
		touched[ref.JobID] = true
		if kicked {
			rep.Redriven++
		}
	}
	return nil
}

// kick enqueues the next turn of a shard if its job is running and the
// shard is not finished, and reports whether it did. The turn number makes
// it a no-op when a turn is already queued or running (queue dedup, store
// turn fencing).
func (r *Reconciler) kick(ctx context.Context, jobID string, index int) (bool, error) {
	view, err := r.Store.GetJob(ctx, jobID)
	if err != nil {
		return false, fmt.Errorf("read job %s: %w", jobID, err)
	}
	if index >= len(view.Shards) {
		return false, nil
	}
	sh := view.Shards[index]
	if view.Job.Status == store.JobCompleted || view.Job.Status == store.JobPartial || view.Job.Status == store.JobFailed {
		// Settled items re-opened a finished shard: run it again.
		if sh.Counts.Pending == 0 {
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

// checkJob verifies that a job's counts add up to its total and finishes it
// when all its shards are done.
func (r *Reconciler) checkJob(ctx context.Context, jobID string, rep *Report) error {
	view, err := r.Store.GetJob(ctx, jobID)
	if err != nil {
		return fmt.Errorf("read job %s: %w", jobID, err)
	}
	if got := view.Counts().Total(); got != view.Job.Total {
		rep.Mismatches++
		r.log().Error("job counts do not add up", slog.String("job", jobID), slog.Int64("total", view.Job.Total), slog.Int64("counted", got))
		alert.Emit(ctx, r.Alerts, r.log(), alert.Event{Type: alert.CountsMismatch, Tenant: view.Job.Tenant, Time: r.Clock.Now(),
			Detail: alert.CountsMismatchDetail{JobID: jobID, Total: view.Job.Total, Counted: got}})
	}
	return sender.FinishJob(ctx, r.Store, r.Alerts, r.log(), jobID, r.Clock.Now())
}
