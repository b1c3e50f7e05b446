package sender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/store"
)

// Finishing a job races with changes made outside turns that send items
// back to pending (an operator's redrive or resend, the reconciler's
// re-pend). Such a change marks its shard dirty before it writes items
// (store.BeginOutsideTurn) and checks the job's status after it wrote them
// (Repended); FinishJob reads the shards before it finishes the job and
// again after. So either FinishJob sees the change (a dirty shard, or
// pending items) and leaves the job running, or the change sees the job
// finished and runs it again (abandons its items if the job was
// cancelled). Neither side can miss the other.

// FinishJob ends a running job whose shards are all final: completed when
// everything was confirmed, partial when some items failed or were
// abandoned, failed when none was confirmed. It is safe to call from several
// places at once: only one transition wins, and only the winner publishes
// JobFinished (and DeadLetters when items failed).
//
// Only clean counts finish a job: a final shard that is dirty (an outside
// change under way, or one that died before folding) or that has pending
// items is put back to running instead, so that a turn recounts it and
// finishes it again (the reconciler re-drives it if nobody else does).
func FinishJob(ctx context.Context, st store.Store, alerts alert.Publisher, log *slog.Logger, jobID string, now time.Time) error {
	view, err := st.GetJob(ctx, jobID)
	if err != nil {
		return fmt.Errorf("read job: %w", err)
	}
	if view.Job.Status != store.JobRunning {
		return nil
	}
	if reopened, err := reopenUnsettled(ctx, st, log, view, now); err != nil || reopened {
		return err
	}
	for _, sh := range view.Shards {
		if !store.ShardFinal(sh.Status) {
			return nil
		}
	}
	c := view.Counts()
	if c.Pending > 0 || c.Submitted > 0 {
		return nil
	}
	to := store.JobCompleted
	switch {
	case c.Confirmed == 0 && c.Total() > 0:
		to = store.JobFailed
	case c.Failed > 0 || c.Abandoned > 0:
		to = store.JobPartial
	}
	job, err := st.TransitionJob(ctx, store.TransitionJobParams{
		JobID: jobID, From: []store.JobStatus{store.JobRunning}, To: to, At: now,
	})
	if errors.Is(err, store.ErrInvalidTransition) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finish job: %w", err)
	}
	if to != store.JobCompleted {
		// Read again: a change that marked a shard after the read above
		// checked the job before we finished it, so it will not run the
		// job again; we must. (A completed job has nothing that could go
		// back to pending: every item was confirmed.)
		after, err := st.GetJob(ctx, jobID)
		if err != nil {
			return fmt.Errorf("read finished job: %w", err)
		}
		if unsettled(after) {
			if _, err := st.TransitionJob(ctx, store.TransitionJobParams{
				JobID: jobID, From: []store.JobStatus{to}, To: store.JobRunning, At: now,
			}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
				return fmt.Errorf("run job again: %w", err)
			}
			logger(log).Info("job changed while finishing; running it again", slog.String("job", jobID))
			after.Job.Status = store.JobRunning
			_, err := reopenUnsettled(ctx, st, log, after, now)
			return err
		}
	}
	failures := view.Failures()
	events := []alert.Event{{Type: alert.JobFinished, Tenant: job.Tenant, Time: now, Detail: alert.JobFinishedDetail{
		JobID: jobID, Name: job.Name, Status: string(to), Counts: alert.Counts(c), Failures: failures,
	}}}
	dead := map[string]int64{}
	for _, cat := range []string{store.CategoryExhausted, store.CategoryPermanent} {
		if failures[cat] > 0 {
			dead[cat] = failures[cat]
		}
	}
	if len(dead) > 0 {
		events = append(events, alert.Event{Type: alert.DeadLetters, Tenant: job.Tenant, Time: now,
			Detail: alert.DeadLettersDetail{JobID: jobID, Failures: dead}})
	}
	alert.Emit(ctx, alerts, log, events...)
	return nil
}

// unsettled reports whether a shard of the job is dirty or has pending or
// submitted items.
func unsettled(v store.JobView) bool {
	for _, sh := range v.Shards {
		if sh.Dirty || sh.Counts.Pending > 0 || sh.Counts.Submitted > 0 {
			return true
		}
	}
	return false
}

// reopenUnsettled puts back to running every final, not cancelled shard of
// a running job that is dirty or has pending items, and reports whether
// there was one. A turn (the next one, or the reconciler's redrive of a
// running shard without progress) recounts it and finishes it again.
func reopenUnsettled(ctx context.Context, st store.Store, log *slog.Logger, v store.JobView, now time.Time) (bool, error) {
	if v.Job.Status != store.JobRunning {
		return false, nil
	}
	reopened := false
	for _, sh := range v.Shards {
		if !store.ShardFinal(sh.Status) || sh.Status == store.ShardCancelled || !sh.Dirty && sh.Counts.Pending == 0 {
			continue
		}
		if _, err := st.TransitionShard(ctx, store.TransitionShardParams{
			JobID: v.Job.ID, Index: sh.Index, From: []store.ShardStatus{store.ShardCompleted, store.ShardFailed},
			To: store.ShardRunning, At: now,
		}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
			return true, fmt.Errorf("reopen shard %d: %w", sh.Index, err)
		}
		logger(log).Info("finished shard unsettled; running it again", slog.String("job", v.Job.ID), slog.Int("shard", sh.Index),
			slog.Bool("dirty", sh.Dirty), slog.Int64("pending", sh.Counts.Pending))
		reopened = true
	}
	return reopened, nil
}

func logger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.Default()
}

// Repended is the second half of a change made outside a turn that sent
// items of a job's shards back to pending (redrive, resend, the
// reconciler's re-pend), called after the items were written and their
// counts folded. The job may have been cancelled or finished meanwhile:
//
//   - cancelled: the items are abandoned (cancel is irreversible; they were
//     never delivered);
//   - finished (partial or failed): it runs again;
//   - a finished shard with pending items runs again;
//
// then a turn is enqueued for each of those shards that is not final while
// the job runs, and the job is finished if nothing is left to do.
func Repended(ctx context.Context, st store.Store, q queue.Queue, alerts alert.Publisher, log *slog.Logger, jobID string, shards []int, now time.Time) error {
	view, err := st.GetJob(ctx, jobID)
	if err != nil {
		return fmt.Errorf("read job %s: %w", jobID, err)
	}
	if view.Job.Status == store.JobCancelled {
		for _, idx := range shards {
			if err := AbandonPending(ctx, st, jobID, idx, "job cancelled; the provider never received it", now); err != nil {
				return err
			}
		}
		return nil
	}
	pending := false
	for _, sh := range view.Shards {
		if slices.Contains(shards, sh.Index) && sh.Counts.Pending > 0 {
			pending = true
		}
	}
	if !pending {
		return FinishJob(ctx, st, alerts, log, jobID, now)
	}
	if view.Job.Status == store.JobPartial || view.Job.Status == store.JobFailed {
		if _, err := st.TransitionJob(ctx, store.TransitionJobParams{
			JobID: jobID, From: []store.JobStatus{store.JobPartial, store.JobFailed}, To: store.JobRunning, At: now,
		}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
			return fmt.Errorf("run job %s again: %w", jobID, err)
		}
	}
	for _, idx := range shards {
		if idx >= len(view.Shards) {
			continue
		}
		sh := view.Shards[idx]
		if sh.Counts.Pending > 0 && (sh.Status == store.ShardCompleted || sh.Status == store.ShardFailed) {
			if _, err := st.TransitionShard(ctx, store.TransitionShardParams{
				JobID: jobID, Index: idx, From: []store.ShardStatus{store.ShardCompleted, store.ShardFailed},
				To: store.ShardRunning, At: now,
			}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
				return fmt.Errorf("reopen shard %s/%d: %w", jobID, idx, err)
			}
		}
	}
	view, err = st.GetJob(ctx, jobID)
	if err != nil {
		return fmt.Errorf("read job %s: %w", jobID, err)
	}
	if view.Job.Status != store.JobRunning && view.Job.Status != store.JobCancelled {
		return nil // paused: resume enqueues its unfinished shards
	}
	for _, idx := range shards {
		if idx < len(view.Shards) && !store.ShardFinal(view.Shards[idx].Status) {
			sh := view.Shards[idx]
			if err := dispatch.Send(ctx, q, dispatch.Turn{JobID: jobID, Shard: idx, Turn: sh.Turn + 1}); err != nil {
				return err
			}
		}
	}
	if view.Job.Status == store.JobCancelled {
		// Cancelled meanwhile: the turns just enqueued abandon what is left
		// of unfinished shards; abandon the rest here.
		for _, idx := range shards {
			if err := AbandonPending(ctx, st, jobID, idx, "job cancelled; the provider never received it", now); err != nil {
				return err
			}
		}
	}
	return nil
}

// AbandonPending abandons every pending item of a shard of a cancelled
// job, outside any turn (dirty mark first, counts folded after).
func AbandonPending(ctx context.Context, st store.Store, jobID string, index int, why string, now time.Time) error {
	return store.WorkItems(ctx, st, store.ListItemsParams{JobID: jobID, Status: store.ItemPending, Shard: &index, Limit: store.MaxPutItems},
		func(items []store.Item) (bool, bool, error) {
			sh, err := store.BeginOutsideTurn(ctx, st, jobID, index)
			if err != nil {
				return false, false, fmt.Errorf("mark shard %s/%d dirty: %w", jobID, index, err)
			}
			ups := make([]store.ItemUpdate, len(items))
			for i, it := range items {
				ups[i] = store.ItemUpdate{Seq: it.Seq, From: store.ItemPending, To: store.ItemAbandoned,
					Error: &store.ItemError{Category: store.CategoryCancelled, Message: why}}
			}
			res, err := st.UpdateItems(ctx, store.UpdateItemsParams{JobID: jobID, Index: index, Updates: ups, At: now})
			if err != nil {
				return false, false, fmt.Errorf("abandon items of %s/%d: %w", jobID, index, err)
			}
			if _, err := store.FoldOutsideTurn(ctx, st, sh, res.Delta, res.FailuresDelta); err != nil {
				return false, false, fmt.Errorf("fold abandoned counts of %s/%d: %w", jobID, index, err)
			}
			all := len(res.Rejected) == len(ups) // someone else moved them
			return !all, all, nil
		})
}
