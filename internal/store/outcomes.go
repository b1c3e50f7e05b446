package store

import (
	"context"
	"fmt"
	"time"
)

// OutcomesReplayMargin is how far before a shard's outcomes watermark a
// replay starts: outcomes are timed by the clock of the process that
// recorded them (a sender, the reconciler, the API), and these clocks may
// differ by up to this much.
const OutcomesReplayMargin = time.Minute

// OutcomesOutsideGrace is how long outside changes of a shard may stay
// unfinished (marked, not folded) before a turn takes one of them for
// dead and publishes the shard's outcomes again: a change marks, writes,
// publishes and folds within seconds.
const OutcomesOutsideGrace = time.Minute

// AdvanceOutcomes applies an AdvanceShard's outcomes fields to sh, after
// its counts were folded (folded) or recounted: the watermark moves
// forward only when the delta was folded at p.Epoch (no recount, no
// outside change came between) and no outside change is unfinished, the
// replay marks are cleared only when the delta was folded at p.Epoch, and
// OutcomesUnpublished sets the mark whatever the epoch.
func AdvanceOutcomes(sh *Shard, p AdvanceShardParams, folded bool) {
	if folded && p.OutcomesReplayed {
		sh.OutcomesReplay, sh.OutcomesOutside, sh.OutcomesOutsideSeenAt = false, 0, time.Time{}
	}
	if folded && sh.OutcomesOutside == 0 && p.OutcomesPublishedTo.After(sh.OutcomesPublishedTo) {
		sh.OutcomesPublishedTo = p.OutcomesPublishedTo
	}
	if sh.OutcomesOutside > 0 && sh.OutcomesOutsideSeenAt.IsZero() {
		sh.OutcomesOutsideSeenAt = p.OutcomesOutsideSeenAt
	}
	if p.OutcomesUnpublished {
		sh.OutcomesReplay = true
	}
}

// AddOutsideOutcomes applies an AddShardCounts's outcomes fields to sh,
// after its counts were folded (folded) or recounted.
func AddOutsideOutcomes(sh *Shard, p AddShardCountsParams, folded bool) {
	if p.OutcomesPublished && sh.OutcomesOutside > 0 {
		sh.OutcomesOutside--
	}
	if folded && p.OutcomesReplayed {
		sh.OutcomesReplay, sh.OutcomesOutside = false, 0
	}
	if sh.OutcomesOutside == 0 {
		sh.OutcomesOutsideSeenAt = time.Time{}
	}
}

// OutcomesNeedReplay reports whether a turn starting at now should publish
// sh's outcomes again: a turn died or could not publish, or outside
// changes have stayed unfinished OutcomesOutsideGrace since a turn first
// saw them (see Shard.OutcomesReplay).
func OutcomesNeedReplay(sh Shard, now time.Time) bool {
	return sh.OutcomesReplay || (sh.OutcomesOutside > 0 && !sh.OutcomesOutsideSeenAt.IsZero() &&
		now.Sub(sh.OutcomesOutsideSeenAt) >= OutcomesOutsideGrace)
}

// OutcomesMayBeUnpublished reports whether any change of sh may have
// recorded outcomes it did not publish, for a shard no turn works any
// more (the reconciler's sweep of final shards, see NeedsSweep).
func OutcomesMayBeUnpublished(sh Shard) bool {
	return sh.OutcomesReplay || sh.OutcomesOutside > 0
}

// NeedsSweep reports whether a shard in a final status is the
// reconciler's to sweep (ListDirtyShards): it is Dirty (a change may have
// died between its item writes and its fold), or its outcomes may be
// unpublished (OutcomesMayBeUnpublished: its last turn could not publish
// them, or an outside change is unfinished). No turn comes to a final
// shard to repair either.
func NeedsSweep(sh Shard) bool { return sh.Dirty || OutcomesMayBeUnpublished(sh) }

// ReplayOutcomesFrom is the finish time after which a replay of sh's
// outcomes lists its items: its watermark less OutcomesReplayMargin (the
// zero time for a shard that never published).
func ReplayOutcomesFrom(sh Shard) time.Time {
	if sh.OutcomesPublishedTo.IsZero() {
		return time.Time{}
	}
	return sh.OutcomesPublishedTo.Add(-OutcomesReplayMargin)
}

// ListOutcomesSince calls fn with the final items (confirmed, failed,
// abandoned) of one shard that finished after after, a page (of at most
// store.MaxPutItems) at a time, in seq order within each status. It reads
// every final item of the shard (ListItems by status and shard): a replay
// is rare (a turn died, an outside change marked the shard), and its cost
// is that of listing the shard's settled items once.
func ListOutcomesSince(ctx context.Context, s Store, jobID string, index int, after time.Time, fn func([]Item) error) error {
	for _, st := range []ItemStatus{ItemConfirmed, ItemFailed, ItemAbandoned} {
		p := ListItemsParams{JobID: jobID, Status: st, Shard: &index, Limit: MaxPutItems}
		for {
			page, err := s.ListItems(ctx, p)
			if err != nil {
				return fmt.Errorf("list %s items of shard %s/%d: %w", st, jobID, index, err)
			}
			var out []Item
			for _, it := range page.Items {
				if it.FinishedAt.After(after) {
					out = append(out, it)
				}
			}
			if len(out) > 0 {
				if err := fn(out); err != nil {
					return err
				}
			}
			if page.NextCursor == "" {
				break
			}
			p.Cursor = page.NextCursor
		}
	}
	return nil
}
