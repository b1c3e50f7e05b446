package sender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/store"
)

// What the budget counts (DESIGN.md rule 6, docs/operations.md "Budget").
//
// A sender reserves budget for a batch before it claims the batch's items,
// never more than the shard has pending. A unit stays used when its send
// reached the provider (whatever the answer); it is given back when the
// send never happened (nothing claimable, suppressed, rate-limited, account
// down, restored after a breaker trip). A shard that finds the budget used
// up while it still has pending items pauses the job for budget.
//
// Shards race for the last units: one may find the budget used up because
// another holds a reservation it later gives back. The pause is therefore
// not final until every reservation it counted has been sent or given back:
// the pausing shard re-reads the usage after its pause, and a shard whose
// give-back turns a used-up budget into one with room lifts a budget pause
// (LiftBudgetPause). Whichever of the two writes comes second sees the
// other, so the job never stays paused for budget with budget left, and a
// pause an operator made, or a budget an operator raised, is never undone
// by a sender.

// reserveBudget reserves budget for up to n sends of this shard and returns
// how many it got (n when the job has no budget).
func (tr *turn) reserveBudget(ctx context.Context, n int) (int64, error) {
	if tr.job.Budget <= 0 {
		return int64(n), nil
	}
	// Holding more than the shard can send would make other shards find the
	// budget used up for nothing.
	if p := tr.shard.Counts.Pending; p > 0 && p < int64(n) {
		n = int(p)
	}
	g, err := tr.s.Store.ReserveBudget(ctx, tr.job.ID, int64(n))
	if err != nil {
		return 0, fmt.Errorf("reserve budget: %w", err)
	}
	return g.Granted, nil
}

// giveBackBudget returns n reserved units whose sends never happened. When
// that makes room in a budget that was used up, a shard may have paused the
// job meanwhile: the pause is lifted.
func (tr *turn) giveBackBudget(ctx context.Context, n int64) {
	if tr.job.Budget <= 0 || n <= 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	g, err := tr.s.Store.ReserveBudget(ctx, tr.job.ID, -n)
	if err != nil {
		tr.log.Error("give back budget", slog.Int64("items", n), slog.Any("err", err))
		return
	}
	if !madeRoom(g) {
		return
	}
	lifted, err := LiftBudgetPause(ctx, tr.s.Store, tr.s.Queue, tr.job.ID, tr.t.Shard, tr.s.Clock.Now())
	if err != nil {
		tr.log.Error("lift budget pause", slog.Any("err", err))
		return
	}
	if lifted {
		tr.log.Info("budget pause lifted: a reservation was given back", slog.Int64("given_back", n))
	}
}

// madeRoom reports whether a give-back turned a used-up budget into one
// with room.
func madeRoom(g store.BudgetGrant) bool {
	return g.Granted < 0 && g.Budget > 0 && g.Used < g.Budget && g.Used-g.Granted >= g.Budget
}

// GiveBackBudget returns n units of a job's budget reserved for sends that
// never happened (the reconciler's re-pends, for one) and lifts a budget
// pause that was waiting for them. A job without a budget is left alone.
func GiveBackBudget(ctx context.Context, st store.Store, q queue.Queue, jobID string, n int64, now time.Time) error {
	if n <= 0 {
		return nil
	}
	g, err := st.ReserveBudget(ctx, jobID, -n)
	if err != nil {
		return fmt.Errorf("give back budget: %w", err)
	}
	if !madeRoom(g) {
		return nil
	}
	_, err = LiftBudgetPause(ctx, st, q, jobID, -1, now)
	return err
}

// pauseForBudget pauses the job because this shard found the budget used
// up. When a reservation was given back in the meantime, the pause is
// lifted at once and the turn goes on (stop false); otherwise the turn ends
// and, if this shard made the pause, JobPaused is published.
func (tr *turn) pauseForBudget(ctx context.Context) (bool, Result, error) {
	paused := true
	if _, err := tr.s.Store.TransitionJob(ctx, store.TransitionJobParams{
		JobID: tr.job.ID, From: []store.JobStatus{store.JobRunning}, To: store.JobPaused,
		PauseReason: store.PauseBudget, At: tr.s.Clock.Now(),
	}); errors.Is(err, store.ErrInvalidTransition) {
		paused = false // paused, cancelled or finished by someone else
	} else if err != nil {
		return true, Result{}, fmt.Errorf("pause job for budget: %w", err)
	}
	// Each look either decides or sees another writer's change, and only
	// the senders' few reservations can change the usage while paused.
	for range 8 {
		lifted, view, err := liftBudgetPause(ctx, tr.s.Store, tr.s.Queue, tr.job.ID, tr.t.Shard, tr.s.Clock.Now())
		if err != nil {
			return true, Result{}, err
		}
		j := view.Job
		budgetPaused := j.Status == store.JobPaused && j.PauseReason == store.PauseBudget
		switch {
		case lifted:
			tr.log.Info("budget pause lifted at once: budget was given back meanwhile",
				slog.Int64("budget", j.Budget), slog.Int64("budget_used", j.BudgetUsed))
			return false, Result{}, nil
		case j.Status == store.JobRunning:
			// A shard that gave budget back has lifted the pause already.
			return false, Result{}, nil
		case budgetPaused && j.Budget > 0 && j.BudgetUsed < j.Budget:
			continue // the usage or status changed under us: look again
		case budgetPaused && paused:
			tr.log.Info("job paused", slog.String("reason", string(store.PauseBudget)))
			tr.flushOutcomes(ctx)
			alert.Emit(ctx, tr.s.Alerts, tr.log, alert.Event{Type: alert.JobPaused, Tenant: tr.job.Tenant, Time: tr.s.Clock.Now(),
				Detail: alert.JobPausedDetail{JobID: tr.job.ID, Reason: string(store.PauseBudget), Budget: j.Budget, BudgetUsed: j.BudgetUsed}})
		}
		break
	}
	res, err := tr.end(ctx, "job paused ("+string(store.PauseBudget)+")")
	return true, res, err
}

// LiftBudgetPause resumes a job paused for budget when its budget has room
// again, and enqueues a turn for every unfinished shard but except (the
// caller's own, whose turn goes on; −1 for none). It never lifts another
// kind of pause. It reports whether this call lifted it.
func LiftBudgetPause(ctx context.Context, st store.Store, q queue.Queue, jobID string, except int, now time.Time) (bool, error) {
	lifted, _, err := liftBudgetPause(ctx, st, q, jobID, except, now)
	return lifted, err
}

// liftBudgetPause is LiftBudgetPause, also returning the job as it read it
// before deciding.
func liftBudgetPause(ctx context.Context, st store.Store, q queue.Queue, jobID string, except int, now time.Time) (bool, store.JobView, error) {
	view, err := st.GetJob(ctx, jobID)
	if err != nil {
		return false, view, fmt.Errorf("read job to lift its budget pause: %w", err)
	}
	j := view.Job
	if j.Status != store.JobPaused || j.PauseReason != store.PauseBudget || j.Budget <= 0 || j.BudgetUsed >= j.Budget {
		return false, view, nil
	}
	if _, err := st.TransitionJob(ctx, store.TransitionJobParams{
		JobID: jobID, From: []store.JobStatus{store.JobPaused}, FromPauseReason: store.PauseBudget,
		To: store.JobRunning, At: now,
	}); errors.Is(err, store.ErrInvalidTransition) {
		return false, view, nil
	} else if err != nil {
		return false, view, fmt.Errorf("lift budget pause: %w", err)
	}
	for _, sh := range view.Shards {
		if sh.Index == except || store.ShardFinal(sh.Status) {
			continue
		}
		if err := dispatch.Send(ctx, q, dispatch.Turn{JobID: jobID, Shard: sh.Index, Turn: sh.Turn + 1}); err != nil {
			return true, view, fmt.Errorf("restart shard %d after lifting the budget pause: %w", sh.Index, err)
		}
	}
	return true, view, nil
}
