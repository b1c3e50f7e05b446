package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

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
	var tenant string
	var items map[int64]store.Item
	if r.Outcomes != nil && s.To != store.ItemSubmitted {
		// Who the items went to, for their outcomes: read before they
		// leave submitted.
		if tenant, items, err = r.callItems(ctx, c); err != nil {
			return 0, err
		}
	}
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
		n += len(seqs) - len(res.Rejected)
		if items != nil {
			// Published before the fold: a publish that fails leaves the
			// shard dirty (recounted, not folded) and marked for replay.
			err := r.publishOutcomes(ctx, tenant, c.JobID, ups, res.Rejected, func(seq int64) (store.Item, bool) {
				it, ok := items[seq]
				return it, ok
			}, now)
			if err != nil {
				r.log().Error("publish outcomes; the shard stays dirty to publish them again",
					slog.String("job", k.job), slog.Int("shard", k.shard), slog.Any("err", err))
				r.repairCounts(ctx, k)
				continue
			}
		}
		if _, err := store.FoldOutsideTurn(ctx, r.Store, sh, res.Delta, res.FailuresDelta); err != nil {
			r.repairCounts(ctx, k)
			return n, fmt.Errorf("fold settled counts of shard %s/%d: %w", k.job, k.shard, err)
		}
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

// callItems reads the items of c still submitted under its claim (by seq
// with Items, else from the shard's submitted items, paged until every
// one of c's is found) and the tenant of their job.
func (r *Reconciler) callItems(ctx context.Context, c store.MsgCall) (string, map[int64]store.Item, error) {
	v, err := r.Store.GetJob(ctx, c.JobID)
	if err != nil {
		return "", nil, fmt.Errorf("read job %s: %w", c.JobID, err)
	}
	items := make(map[int64]store.Item, len(c.Seqs))
	if r.Items != nil {
		for start := 0; start < len(c.Seqs); start += store.MaxPutItems {
			got, err := r.Items.GetItems(ctx, store.GetItemsParams{JobID: c.JobID, Shard: c.Shard, Seqs: c.Seqs[start:min(start+store.MaxPutItems, len(c.Seqs))]})
			if err != nil {
				return "", nil, fmt.Errorf("read the items of %s/%s: %w", c.Account, c.MsgID, err)
			}
			for _, it := range got {
				if it.Status == store.ItemSubmitted && it.ClaimID == c.ClaimID {
					items[it.Seq] = it
				}
			}
		}
		return v.Job.Tenant, items, nil
	}
	want := make(map[int64]bool, len(c.Seqs))
	for _, seq := range c.Seqs {
		want[seq] = true
	}
	shard := c.Shard
	p := store.ListItemsParams{JobID: c.JobID, Status: store.ItemSubmitted, Shard: &shard, Limit: store.MaxPutItems}
	for {
		page, err := r.Store.ListItems(ctx, p)
		if err != nil {
			return "", nil, fmt.Errorf("read the items of %s/%s: %w", c.Account, c.MsgID, err)
		}
		for _, it := range page.Items {
			if want[it.Seq] && it.ClaimID == c.ClaimID {
				items[it.Seq] = it
			}
		}
		if page.NextCursor == "" || len(items) == len(want) {
			return v.Job.Tenant, items, nil
		}
		p.Cursor = page.NextCursor
	}
}

// publishOutcomes publishes the items that ups made final (those not
// rejected) as one ItemOutcomes event of the job, and returns the
// publisher's error.
func (r *Reconciler) publishOutcomes(ctx context.Context, tenant, jobID string, ups []store.ItemUpdate, rejected []int64,
	item func(seq int64) (store.Item, bool), now time.Time) error {
	var out []alert.ItemOutcome
	for _, u := range ups {
		switch u.To {
		case store.ItemConfirmed, store.ItemFailed, store.ItemAbandoned:
		default:
			continue
		}
		it, ok := item(u.Seq)
		if !ok || slices.Contains(rejected, u.Seq) {
			continue
		}
		o := alert.ItemOutcome{Seq: u.Seq, Account: it.Account, To: it.To, Ref: it.Ref, Status: string(u.To), MsgID: cmp.Or(u.MsgID, it.MsgID), At: now}
		if u.Error != nil {
			o.Category, o.Code = u.Error.Category, u.Error.Code
		}
		out = append(out, o)
	}
	if len(out) == 0 {
		return nil
	}
	return r.Outcomes.Publish(context.WithoutCancel(ctx), alert.Event{Type: alert.ItemOutcomes, Tenant: tenant, Time: now,
		Detail: alert.ItemOutcomesDetail{JobID: jobID, Items: out}})
}

// replayOutcomes publishes again, as ItemOutcomes events of a page each,
// the outcomes of a shard's items that finished after its watermark less
// store.OutcomesReplayMargin, when the shard is marked for it (see
// store.Shard.OutcomesPublishedTo): the sweep of a dirty final shard, which
// gets no more turns to do it, whose outside change may have died between
// recording outcomes and publishing them.
func (r *Reconciler) replayOutcomes(ctx context.Context, job store.Job, sh store.Shard) error {
	if r.Outcomes == nil || !store.OutcomesMayBeUnpublished(sh) {
		return nil
	}
	from := store.ReplayOutcomesFrom(sh)
	n := 0
	err := store.ListOutcomesSince(ctx, r.Store, sh.JobID, sh.Index, from, func(items []store.Item) error {
		out := make([]alert.ItemOutcome, 0, len(items))
		var last time.Time
		for _, it := range items {
			o := alert.ItemOutcome{Seq: it.Seq, Account: it.Account, To: it.To, Ref: it.Ref, Status: string(it.Status), MsgID: it.MsgID, At: it.FinishedAt}
			if it.Error != nil {
				o.Category, o.Code = it.Error.Category, it.Error.Code
			}
			out = append(out, o)
			if it.FinishedAt.After(last) {
				last = it.FinishedAt
			}
		}
		n += len(out)
		return r.Outcomes.Publish(context.WithoutCancel(ctx), alert.Event{Type: alert.ItemOutcomes, Tenant: job.Tenant, Time: last,
			Detail: alert.ItemOutcomesDetail{JobID: job.ID, Items: out}})
	})
	if err != nil {
		return fmt.Errorf("publish again the outcomes of shard %s/%d: %w", sh.JobID, sh.Index, err)
	}
	r.log().Info("outcomes published again", slog.String("job", sh.JobID), slog.Int("shard", sh.Index), slog.Int("outcomes", n))
	return nil
}
