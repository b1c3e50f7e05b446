package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
)

// sweepDirty recounts the final shards left dirty — a change made outside
// a turn (a settle, redrive, resolve or cancel) died between its item
// writes and its fold, on a shard that gets no more turns — and clears
// their mark, at most DirtyPerPass of them; it also publishes again the
// outcomes of final shards whose outcomes may be unpublished (their last
// turn could not publish, or an outside change was unfinished when it
// ended) and clears those marks. A shard whose counts were wrong is
// reported (CountsMismatch); one left with pending items is handed to
// sender.Repended (abandoned if its job was cancelled, run again if it
// finished).
func (r *Reconciler) sweepDirty(ctx context.Context, rep *Report, touched map[string]bool) error {
	refs, err := r.Store.ListDirtyShards(ctx, store.ListDirtyShardsParams{Limit: intOr(r.DirtyPerPass, 100)})
	if err != nil {
		return fmt.Errorf("list dirty shards: %w", err)
	}
	var errs []error
	for _, ref := range refs {
		if err := r.sweepShard(ctx, rep, ref); err != nil {
			errs = append(errs, err) // one shard's trouble must not stop the others
			continue
		}
		touched[ref.JobID] = true
	}
	return errors.Join(errs...)
}

// sweepShard recounts one dirty final shard and clears its mark, on
// condition nothing folded or recounted it meanwhile (the fold is at the
// recount's epoch; otherwise the mark stays for the next pass).
func (r *Reconciler) sweepShard(ctx context.Context, rep *Report, ref store.ShardRef) error {
	view, err := r.Store.GetJob(ctx, ref.JobID)
	if err != nil {
		return fmt.Errorf("read job %s: %w", ref.JobID, err)
	}
	if ref.Index >= len(view.Shards) {
		return nil
	}
	sh := view.Shards[ref.Index]
	if !sh.Dirty {
		return r.sweepOutcomes(ctx, rep, view.Job, sh)
	}
	rc, err := r.Store.RecountShard(ctx, ref.JobID, ref.Index)
	if err != nil {
		return fmt.Errorf("recount dirty shard %s/%d: %w", ref.JobID, ref.Index, err)
	}
	// The mark is cleared only when no item is left pending or submitted:
	// a turn may still be at work on the shard (a final shard gets turns
	// that abandon its pending items or record calls still running), and
	// with nothing left to move, nothing it could write is missing from
	// the recount. Otherwise the mark stays for a later pass.
	if rc.Counts.Pending == 0 && rc.Counts.Submitted == 0 {
		// Whatever marked it may have died before publishing outcomes
		// it recorded: publish them again before the mark goes.
		if err := r.replayOutcomes(ctx, view.Job, rc); err != nil {
			return err
		}
		cleared, err := r.Store.AddShardCounts(ctx, store.AddShardCountsParams{JobID: ref.JobID, Index: ref.Index, Epoch: rc.Epoch, ClearDirty: true,
			OutcomesReplayed: true})
		if err != nil {
			return fmt.Errorf("clear the mark of dirty shard %s/%d: %w", ref.JobID, ref.Index, err)
		}
		if !cleared.Dirty {
			rep.Swept++
		}
	}
	if rc.Epoch == sh.Epoch+1 && rc.Counts != sh.Counts {
		r.mismatch(ctx, rep, view, sh, rc)
	}
	if rc.Counts.Pending > 0 {
		return sender.Repended(ctx, r.Store, r.Queue, r.Alerts, r.log(), ref.JobID, []int{ref.Index}, r.Clock.Now())
	}
	return nil
}

// sweepOutcomes publishes again the outcomes of a clean final shard
// marked for it (store.OutcomesMayBeUnpublished) and clears the marks, on
// condition nothing folded, recounted or marked it meanwhile (otherwise
// they stay for a later pass). Its counts need no recount, and items
// still submitted (under review) do not hold it back: whatever settles
// them later publishes their outcomes itself.
//
// An outside change unfinished when the shard's last turn ended (first
// seen then) may still be under way: it is taken for dead, as a turn
// would (store.OutcomesNeedReplay), only once it has stayed unfinished
// for store.OutcomesOutsideGrace; until then the shard stays listed, and
// leaves the listing if the change ends.
func (r *Reconciler) sweepOutcomes(ctx context.Context, rep *Report, job store.Job, sh store.Shard) error {
	if !store.OutcomesMayBeUnpublished(sh) {
		return nil
	}
	if !sh.OutcomesReplay && !sh.OutcomesOutsideSeenAt.IsZero() && !store.OutcomesNeedReplay(sh, r.Clock.Now()) {
		return nil
	}
	if err := r.replayOutcomes(ctx, job, sh); err != nil {
		return err
	}
	cleared, err := r.Store.AddShardCounts(ctx, store.AddShardCountsParams{JobID: sh.JobID, Index: sh.Index, Epoch: sh.Epoch, OutcomesReplayed: true})
	if err != nil {
		return fmt.Errorf("clear the outcome marks of shard %s/%d: %w", sh.JobID, sh.Index, err)
	}
	if !store.NeedsSweep(cleared) {
		rep.Swept++
	}
	return nil
}
