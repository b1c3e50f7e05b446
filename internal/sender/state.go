package sender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/qunfa/qunfa/internal/content"
	"github.com/qunfa/qunfa/internal/store"
)

// checkState re-reads the job record at a batch boundary and stops the turn
// when the job is paused, cancelled or finished, or the shard is paused.
// The shard itself comes back from every flush; it is read again only when
// no flush refreshed it within AccountRefresh (outside changes: redrive,
// resume, reconciliation). So a batch costs the same whatever the job's
// shard count.
func (tr *turn) checkState(ctx context.Context) (bool, Result, error) {
	job, err := tr.s.Store.GetJobRecord(ctx, tr.t.JobID)
	if err != nil {
		return true, Result{}, fmt.Errorf("read job: %w", err)
	}
	if err := tr.adoptJob(job); err != nil {
		return true, Result{}, err
	}
	if now := tr.s.Clock.Now(); now.Sub(tr.shardReadAt) >= tr.cfg.AccountRefresh {
		cur, err := tr.s.Store.GetShard(ctx, tr.t.JobID, tr.t.Shard)
		if errors.Is(err, store.ErrNotFound) {
			return true, Result{Disposition: Done, Reason: "unknown shard"}, nil
		}
		if err != nil {
			return true, Result{}, fmt.Errorf("read shard: %w", err)
		}
		tr.shard.Status, tr.shard.PauseReason, tr.shard.Turn = cur.Status, cur.PauseReason, cur.Turn
		tr.shard.Counts = cur.Counts.Add(tr.delta)
		tr.shardReadAt = now
	}
	if tr.shard.Turn != tr.t.Turn {
		// A newer turn took over (redrive); this one must not continue.
		return true, Result{Disposition: Done, Reason: "superseded"}, nil
	}
	switch {
	case tr.job.Status == store.JobCancelled:
		res, err := tr.cancelShard(ctx)
		return true, res, err
	case tr.job.Status == store.JobPaused:
		res, err := tr.end(ctx, "job paused ("+string(tr.job.PauseReason)+")")
		return true, res, err
	case tr.job.Status != store.JobRunning:
		res, err := tr.end(ctx, "job "+string(tr.job.Status))
		return true, res, err
	case tr.shard.Status == store.ShardPaused && tr.shard.PauseReason != store.PauseBreaker:
		res, err := tr.end(ctx, "shard paused ("+string(tr.shard.PauseReason)+")")
		return true, res, err
	case tr.shard.Status == store.ShardPending:
		if _, err := tr.s.Store.TransitionShard(ctx, store.TransitionShardParams{
			JobID: tr.job.ID, Index: tr.shard.Index, From: []store.ShardStatus{store.ShardPending},
			To: store.ShardRunning, At: tr.s.Clock.Now(),
		}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
			return true, Result{}, fmt.Errorf("start shard: %w", err)
		}
		tr.shard.Status = store.ShardRunning
	case tr.shard.Status != store.ShardCancelled && store.ShardFinal(tr.shard.Status) && tr.shard.Counts.Pending > 0:
		// Items went back to pending after the shard finished (a redrive,
		// a re-pend, a resend racing the finish): run it again.
		if _, err := tr.s.Store.TransitionShard(ctx, store.TransitionShardParams{
			JobID: tr.job.ID, Index: tr.shard.Index, From: []store.ShardStatus{store.ShardCompleted, store.ShardFailed},
			To: store.ShardRunning, At: tr.s.Clock.Now(),
		}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
			return true, Result{}, fmt.Errorf("reopen shard: %w", err)
		}
		tr.log.Info("finished shard has pending items; running it again", slog.Int64("pending", tr.shard.Counts.Pending))
		tr.shard.Status = store.ShardRunning
	case store.ShardFinal(tr.shard.Status):
		// A redelivery after a crash between finishing the shard and the
		// job: end the turn (its dirty mark would keep the job from
		// finishing), then finish the job.
		res, err := tr.end(ctx, "shard "+string(tr.shard.Status))
		if err != nil {
			return true, res, err
		}
		tr.flushOutcomes(ctx) // the items' outcomes before the job's end
		if err := FinishJob(ctx, tr.s.Store, tr.s.Alerts, tr.log, tr.job.ID, tr.s.Clock.Now()); err != nil {
			return true, Result{}, err
		}
		return true, res, nil
	}
	if now := tr.s.Clock.Now(); tr.accountReadAt.IsZero() || now.Sub(tr.accountReadAt) >= tr.cfg.AccountRefresh {
		acct, readAt, err := tr.s.readAccount(ctx, tr.job.Tenant, tr.shard.Account, now, tr.cfg.AccountRefresh)
		if err != nil {
			return true, Result{}, fmt.Errorf("read account %q: %w", tr.shard.Account, err)
		}
		tr.account, tr.accountReadAt = acct, readAt
		tr.sizing = tr.s.sizer(acct, tr.cfg.callBounds(), now)
	}
	return tr.gate(ctx)
}

// shardName identifies the shard to the breaker (the half-open probe
// belongs to one shard).
func (tr *turn) shardName() string {
	return tr.t.JobID + "/" + strconv.Itoa(tr.t.Shard)
}

// nothingPending makes the counts true from the items when they say
// nothing is pending (outside changes may not be folded yet), then
// finishes the shard or ends the turn to wait for reconciliation; when
// items are pending after all, the turn goes on (stop false).
func (tr *turn) nothingPending(ctx context.Context, now time.Time) (Result, bool, error) {
	sh, err := tr.s.Store.RecountShard(context.WithoutCancel(ctx), tr.t.JobID, tr.t.Shard)
	if err != nil {
		return Result{}, true, fmt.Errorf("recount shard: %w", err)
	}
	tr.adoptRecount(sh)
	if sh.Counts.Pending > 0 {
		tr.log.Warn("shard counts said nothing pending; recounted", slog.Int64("pending", sh.Counts.Pending))
		return Result{}, false, nil
	}
	return tr.nothingDue(ctx, time.Time{}, now)
}

func (tr *turn) fold(d store.Counts, f map[string]int64) {
	tr.delta = tr.delta.Add(d)
	tr.shard.Counts = tr.shard.Counts.Add(d)
	for k, n := range f {
		if tr.failures == nil {
			tr.failures = map[string]int64{}
		}
		tr.failures[k] += n
	}
}

// adoptJob takes the job record as read, parsing its template the first
// time.
func (tr *turn) adoptJob(job store.Job) error {
	if tr.job.ID == "" {
		tmpl, err := content.Parse(job.Template)
		if err != nil {
			return fmt.Errorf("parse template of job %s: %w", job.ID, err)
		}
		tr.tmpl = tmpl
	}
	tr.job = job
	return nil
}

// adoptRecount takes the counts and epoch of a recount the turn made. A
// recount moves the epoch by one: by more, an outside change marked the
// shard since the turn's last fold or recount, which a replay made
// before cannot have covered, so the replay's marks are no longer this
// turn's to clear (see flush).
func (tr *turn) adoptRecount(sh store.Shard) {
	if sh.Epoch != tr.shard.Epoch+1 {
		tr.replayed = false
	}
	tr.shard.Counts, tr.shard.Epoch, tr.delta, tr.failures = sh.Counts, sh.Epoch, store.Counts{}, nil
}

// flush folds pending progress into the shard, with the outcomes
// watermark (outcomesWatermark). Ending the turn first waits for and
// records every call still running and publishes every held outcome; an
// outcome it could not publish leaves the shard's replay mark for the
// next turn.
func (tr *turn) flush(ctx context.Context, endTurn bool) error {
	if endTurn {
		if err := tr.collectStragglers(ctx, true); err != nil {
			return err
		}
		tr.flushOutcomes(ctx)
	}
	now := tr.s.Clock.Now()
	p := store.AdvanceShardParams{
		JobID: tr.t.JobID, Index: tr.t.Shard, Turn: tr.t.Turn, Epoch: tr.shard.Epoch,
		Delta: tr.delta, FailuresDelta: tr.failures, Cursor: tr.cursor,
		SlowFactor: tr.slow, At: now, EndTurn: endTurn,
		Attempts: tr.attempts, AttemptFailures: tr.attemptFailures,
		OutcomesPublishedTo: tr.outcomesWatermark(now), OutcomesReplayed: tr.replayed,
		OutcomesUnpublished: endTurn && len(tr.heldOutcomes) > 0, OutcomesOutsideSeenAt: now,
	}
	sh, err := tr.s.Store.AdvanceShard(ctx, p)
	if errors.Is(err, store.ErrConflict) {
		// A newer turn took the shard over; our unfolded delta is lost, so
		// make the counts true again from the items.
		if _, rerr := tr.s.Store.RecountShard(ctx, tr.t.JobID, tr.t.Shard); rerr != nil {
			return fmt.Errorf("recount superseded shard: %w", rerr)
		}
		return errSuperseded
	}
	if err != nil {
		return fmt.Errorf("advance shard: %w", err)
	}
	tr.delta, tr.failures = store.Counts{}, nil
	tr.attempts, tr.attemptFailures, tr.unfolded = 0, 0, 0
	// Folded at the turn's epoch, the replay's marks are cleared. Not
	// folded, an outside change or a recount came since the replay, which
	// cannot have published the outcomes that change records: the marks
	// stay, for the next turn to replay (whatever this turn folds later).
	tr.replayed = false
	tr.shard.Counts, tr.shard.Epoch = sh.Counts, sh.Epoch
	tr.shard.Status, tr.shard.PauseReason, tr.shard.Turn = sh.Status, sh.PauseReason, sh.Turn
	tr.shardReadAt = tr.s.Clock.Now()
	return nil
}
