package sender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/store"
)

// The canary (DESIGN.md, "Preview, canary, frequency caps, warm-up"). A job
// with a canary of N sends its first N items, spread over the shards by
// store.CanaryQuotas, then pauses with reason canary until an operator
// resumes (approves) or cancels it.
//
// A shard's items have contiguous seqs in shard order, so shard i's items
// start at the sum of the sizes of the shards before it, and its canary is
// the first quota of them. Items are claimed lowest seq first, so the
// shard's cursor (one past the highest seq claimed) tells how many fresh
// items it has taken: while the canary is not approved a turn claims at
// most up to the canary's end. A shard that reached it flushes its cursor
// and then looks at every shard: the one that finds all of them there
// pauses the job. Two shards finishing together both flush before they
// look, so at least one sees the other's cursor.

// inCanary reports whether the turn's job is in its canary phase.
func (tr *turn) inCanary() bool {
	return tr.job.Canary > 0 && !tr.job.CanaryApproved
}

// canaryLeft is how many more fresh items this shard may claim in the
// canary phase.
func (tr *turn) canaryLeft(ctx context.Context) (int64, error) {
	if !tr.canaryKnown {
		view, err := tr.s.Store.GetJob(ctx, tr.job.ID)
		if err != nil {
			return 0, fmt.Errorf("read job for its canary: %w", err)
		}
		bases, ends := canaryEnds(view, tr.job.Canary)
		tr.canaryBase, tr.canaryEnd = bases[tr.shard.Index], ends[tr.shard.Index]
		tr.canaryKnown = true
	}
	return tr.canaryEnd - max(tr.canaryBase, tr.shard.Cursor, tr.cursor), nil
}

// canaryEnds is the first seq and one past the last canary seq of every
// shard.
func canaryEnds(view store.JobView, canary int64) (bases, ends []int64) {
	sizes := make([]int64, len(view.Shards))
	for _, sh := range view.Shards {
		if sh.Index >= 0 && sh.Index < len(sizes) {
			sizes[sh.Index] = sh.Size
		}
	}
	quotas := store.CanaryQuotas(sizes, canary)
	bases, ends = make([]int64, len(sizes)), make([]int64, len(sizes))
	var base int64
	for i, size := range sizes {
		bases[i], ends[i] = base, base+quotas[i]
		base += size
	}
	return bases, ends
}

// canarySent ends the turn of a shard that sent its share of the canary,
// pausing the job when every shard has.
func (tr *turn) canarySent(ctx context.Context) (Result, error) {
	if err := tr.flush(ctx, true); err != nil {
		return Result{}, err
	}
	view, err := tr.s.Store.GetJob(ctx, tr.job.ID)
	if err != nil {
		return Result{}, fmt.Errorf("read job for its canary: %w", err)
	}
	bases, ends := canaryEnds(view, view.Job.Canary)
	for _, sh := range view.Shards {
		if !store.ShardFinal(sh.Status) && max(bases[sh.Index], sh.Cursor) < ends[sh.Index] {
			return tr.end(ctx, "canary share sent; other shards still sending theirs")
		}
	}
	_, err = tr.s.Store.TransitionJob(ctx, store.TransitionJobParams{
		JobID: tr.job.ID, From: []store.JobStatus{store.JobRunning}, To: store.JobPaused,
		PauseReason: store.PauseCanary, At: tr.s.Clock.Now(),
	})
	switch {
	case errors.Is(err, store.ErrInvalidTransition):
		// Paused (by another shard, or an operator), cancelled or finished.
		return tr.end(ctx, "canary sent; job "+string(view.Job.Status))
	case err != nil:
		return Result{}, fmt.Errorf("pause job for its canary: %w", err)
	}
	confirmed, failed := store.CanaryResults(view)
	tr.log.Info("job paused", slog.String("reason", string(store.PauseCanary)), slog.Int64("canary", view.Job.Canary),
		slog.Int64("confirmed", confirmed), slog.Int64("failed", failed))
	now := tr.s.Clock.Now()
	tr.flushOutcomes(ctx) // the canary's outcomes before its verdict
	alert.Emit(ctx, tr.s.Alerts, tr.log, alert.Event{Type: alert.CanaryReady, Tenant: tr.job.Tenant, Time: now,
		Detail: alert.CanaryReadyDetail{JobID: tr.job.ID, Canary: view.Job.Canary, Confirmed: confirmed, Failed: failed}})
	alert.Emit(ctx, tr.s.Alerts, tr.log, alert.Event{Type: alert.JobPaused, Tenant: tr.job.Tenant, Time: now,
		Detail: alert.JobPausedDetail{JobID: tr.job.ID, Reason: string(store.PauseCanary)}})
	return tr.end(ctx, "job paused ("+string(store.PauseCanary)+")")
}
