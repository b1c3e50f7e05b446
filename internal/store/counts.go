package store

import "context"

// Counts are item counts by status. They always add up to the total.
type Counts struct {
	Pending   int64 `json:"pending"`
	Submitted int64 `json:"submitted"`
	Confirmed int64 `json:"confirmed"`
	Failed    int64 `json:"failed"`
	Abandoned int64 `json:"abandoned"`
}

// Total is the sum of all counts.
func (c Counts) Total() int64 {
	return c.Pending + c.Submitted + c.Confirmed + c.Failed + c.Abandoned
}

// Add returns c + d.
func (c Counts) Add(d Counts) Counts {
	return Counts{
		Pending:   c.Pending + d.Pending,
		Submitted: c.Submitted + d.Submitted,
		Confirmed: c.Confirmed + d.Confirmed,
		Failed:    c.Failed + d.Failed,
		Abandoned: c.Abandoned + d.Abandoned,
	}
}

// Move records one item moving from one status to another.
func (c *Counts) Move(from, to ItemStatus) {
	if from == to {
		return
	}
	*c.field(from)--
	*c.field(to)++
}

// IsZero reports whether all counts are zero.
func (c Counts) IsZero() bool { return c == Counts{} }

func (c *Counts) field(s ItemStatus) *int64 {
	switch s {
	case ItemPending:
		return &c.Pending
	case ItemSubmitted:
		return &c.Submitted
	case ItemConfirmed:
		return &c.Confirmed
	case ItemFailed:
		return &c.Failed
	default:
		return &c.Abandoned
	}
}

// BeginOutsideTurn marks a shard dirty before a change made outside a
// sender turn (reconciler, operator actions) writes its items, and returns
// the shard as it was before, to hand to FoldOutsideTurn afterwards. Should
// the process die between the item writes and the fold, the shard stays
// Dirty and its counts are recounted from the items (next BeginTurn, the
// reconciler's count check, or its sweep of dirty final shards) instead of
// staying wrong for good. The mark starts the shard's next count epoch, so
// a fold computed before it (a turn's, another change's) recounts instead
// of adding a delta, and only the change that marked last can clear the
// mark.
func BeginOutsideTurn(ctx context.Context, s Store, jobID string, index int) (Shard, error) {
	return s.MarkShardDirty(ctx, jobID, index)
}

// FoldOutsideTurn folds the count changes of item operations made outside a
// sender turn into their shard. before is the shard BeginOutsideTurn
// returned. If it was Dirty already (a turn is running, one died without
// folding its progress, or another outside change is under way) its counts
// cannot be trusted to add a delta to, so they are recounted from the
// items (which also moves the epoch, making any running turn recount at
// its next fold) and Dirty stays. Otherwise the delta is added at the
// epoch the mark started (before.Epoch + 1) and the mark is cleared; if
// the epoch moved since — another change marked the shard, or a turn or a
// recount came between — the counts are recounted instead and Dirty stays,
// for whoever marked or recounted it to settle. Either way it ends the
// change in the shard's OutcomesOutside: call it after the change's
// outcomes are published, never when their publish failed.
func FoldOutsideTurn(ctx context.Context, s Store, before Shard, delta Counts, failures map[string]int64) (Shard, error) {
	if before.Dirty {
		// At the epoch before the mark: always stale, so a recount.
		return s.AddShardCounts(ctx, AddShardCountsParams{
			JobID: before.JobID, Index: before.Index, Epoch: before.Epoch, OutcomesPublished: true,
		})
	}
	return s.AddShardCounts(ctx, AddShardCountsParams{
		JobID: before.JobID, Index: before.Index, Epoch: before.Epoch + 1, Delta: delta, FailuresDelta: failures,
		ClearDirty: true, OutcomesPublished: true,
	})
}

// Impossible reports whether counts cannot be a shard's true counts: a
// negative count, or counts that do not add up to the shard's size. A fold
// that would store such counts recounts from the items instead.
func (c Counts) Impossible(size int64) bool {
	return c.Pending < 0 || c.Submitted < 0 || c.Confirmed < 0 || c.Failed < 0 || c.Abandoned < 0 || c.Total() != size
}
