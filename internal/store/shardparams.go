package store

import "time"

// The parameters of the shard operations of Store: a sender turn's
// (BeginTurn, AdvanceShard), an outside change's fold (AddShardCounts), a
// status change, and the reconciler's listings of shards.

// BeginTurnParams starts a sender turn.
type BeginTurnParams struct {
	JobID     string
	Index     int
	Turn      int64
	MessageID string
	At        time.Time
}

// AdvanceShardParams folds a sender's progress into its shard.
type AdvanceShardParams struct {
	JobID string
	Index int
	Turn  int64
	// Epoch is the shard epoch the delta is relative to; on a mismatch the
	// delta is replaced by a recount.
	Epoch         int64
	Delta         Counts
	FailuresDelta map[string]int64
	Cursor        int64   // kept if lower than the current cursor
	SlowFactor    float64 // 0 = keep
	At            time.Time
	EndTurn       bool
	// Attempts and AttemptFailures are added to the shard's cumulative
	// counters whatever the epoch.
	Attempts        int64
	AttemptFailures int64
	// OutcomesPublishedTo moves the shard's outcomes watermark forward
	// (never back), and OutcomesReplayed clears OutcomesReplay and
	// OutcomesOutside, only when the delta is folded at p.Epoch: an
	// outside change or a recount since may have recorded outcomes this
	// turn has not published.
	OutcomesPublishedTo time.Time
	OutcomesReplayed    bool
	// OutcomesUnpublished sets OutcomesReplay: the turn recorded outcomes
	// it could not publish.
	OutcomesUnpublished bool
	// OutcomesOutsideSeenAt is the turn's time, kept as the shard's
	// OutcomesOutsideSeenAt when outside changes are unfinished and none
	// was seen before.
	OutcomesOutsideSeenAt time.Time
}

// AddShardCountsParams folds a delta into a shard outside a turn.
type AddShardCountsParams struct {
	JobID string
	Index int
	// Epoch is the shard epoch read before the item operations; on a
	// mismatch the delta is replaced by a recount.
	Epoch         int64
	Delta         Counts
	FailuresDelta map[string]int64
	// ClearDirty clears the shard's Dirty flag when the delta is folded at
	// Epoch (the caller marked the shard dirty itself, from clean, and no
	// turn or recount came between). On an epoch mismatch Dirty stays.
	ClearDirty bool
	// OutcomesPublished ends an outside change that marked the shard
	// (OutcomesOutside − 1, whatever the epoch): its outcomes, if any,
	// are published. OutcomesReplayed clears OutcomesReplay and
	// OutcomesOutside when the delta is folded at Epoch (the caller
	// published the shard's outcomes again since reading it).
	OutcomesPublished bool
	OutcomesReplayed  bool
}

// TransitionShardParams changes a shard's status.
type TransitionShardParams struct {
	JobID       string
	Index       int
	From        []ShardStatus
	To          ShardStatus
	PauseReason PauseReason
	At          time.Time
}

// ListStaleShardsParams selects running (or breaker-paused) shards without
// progress.
type ListStaleShardsParams struct {
	Before time.Time
	Limit  int
}

// ListDirtyShardsParams bounds a listing of the final shards that need the
// sweep (NeedsSweep).
type ListDirtyShardsParams struct {
	Limit int // 0 = adapter default (100)
}
