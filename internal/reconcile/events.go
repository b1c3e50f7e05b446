package reconcile

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/store"
)

// Settlement is what a provider event says of every item of one call.
type Settlement struct {
	// To is ItemConfirmed, ItemFailed, or ItemSubmitted (to review).
	To store.ItemStatus
	// Error is the failed or reviewed items' error.
	Error *store.ItemError
}

// SettleMsgCall applies a provider event about account's message id to
// the items of the call accepted under it (store.MsgCall): each still
// submitted under that call's claim moves to s.To; items already settled
// (a duplicate or late event, the reconciler's look-up first) or claimed
// again are left as they are. An unknown message id settles nothing
// (store.ErrNotFound). It needs Store, MsgCalls, Queue and Clock only.
func (r *Reconciler) SettleMsgCall(ctx context.Context, account, msgID string, s Settlement) (int, error) {
	if r.MsgCalls == nil {
		return 0, fmt.Errorf("settle %s/%s: no message-id store", account, msgID)
	}
	switch s.To {
	case store.ItemConfirmed, store.ItemFailed:
	case store.ItemSubmitted:
		s.Error = &store.ItemError{Category: store.CategoryUncertain, Code: store.CodeReview, Message: s.Error.Message}
	default:
		return 0, fmt.Errorf("settle %s/%s: %w: to %s", account, msgID, store.ErrInvalidArgument, s.To)
	}
	c, err := r.MsgCalls.GetMsgCall(ctx, account, msgID)
	if err != nil {
		return 0, fmt.Errorf("settle %s/%s: %w", account, msgID, err)
	}
	now := r.Clock.Now()
	k := shardKey{c.JobID, c.Shard}
	n := 0
	for start := 0; start < len(c.Seqs); start += store.MaxPutItems {
		seqs := c.Seqs[start:min(start+store.MaxPutItems, len(c.Seqs))]
		ups := make([]store.ItemUpdate, len(seqs))
		for i, seq := range seqs {
			ups[i] = store.ItemUpdate{Seq: seq, From: store.ItemSubmitted, ClaimID: c.ClaimID, To: s.To, Error: s.Error, MsgID: msgID}
		}
		sh, err := store.BeginOutsideTurn(ctx, r.Store, k.job, k.shard)
		if err != nil {
			return n, fmt.Errorf("mark shard %s/%d dirty: %w", k.job, k.shard, err)
		}
		res, err := r.Store.UpdateItems(ctx, store.UpdateItemsParams{JobID: k.job, Index: k.shard, Updates: ups, At: now})
		if err != nil {
			r.repairCounts(ctx, k)
			return n, fmt.Errorf("settle items of shard %s/%d: %w", k.job, k.shard, err)
		}
		if _, err := store.FoldOutsideTurn(ctx, r.Store, sh, res.Delta, res.FailuresDelta); err != nil {
			r.repairCounts(ctx, k)
			return n, fmt.Errorf("fold settled counts of shard %s/%d: %w", k.job, k.shard, err)
		}
		n += len(seqs) - len(res.Rejected)
	}
	if n == 0 {
		return 0, nil
	}
	r.log().Info("provider event settled items", slog.String("account", account), slog.String("msg_id", msgID),
		slog.String("job", c.JobID), slog.Int("shard", c.Shard), slog.String("to", string(s.To)), slog.Int("items", n))
	if s.To == store.ItemSubmitted {
		if v, err := r.Store.GetJob(ctx, c.JobID); err == nil {
			alert.Emit(ctx, r.Alerts, r.log(), alert.Event{Type: alert.ItemsNeedReview, Tenant: v.Job.Tenant, Time: now,
				Detail: alert.ItemsNeedReviewDetail{JobID: c.JobID, Count: n}})
		}
	}
	// The shard's sender finishes the job once nothing is left submitted.
	if _, _, err := r.kick(ctx, c.JobID, c.Shard); err != nil {
		return n, err
	}
	return n, nil
}
