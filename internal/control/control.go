// Package control carries out operators' commands on a running job: pause,
// resume, cancel and live limit changes. Every command is a conditional
// status change in the store (a forbidden one is an error and changes
// nothing); senders notice it at their next item boundary. Resume and
// cancel also enqueue a turn for every unfinished shard, so a paused job
// starts again and a cancelled one abandons its remaining items promptly.
package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/dispatch"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/store"
)

// ErrNotAllowed: the command does not apply to the job's current status
// (e.g. resume a running job, cancel a finished one).
var ErrNotAllowed = errors.New("not allowed in the job's current status")

// Controller runs operator commands.
type Controller struct {
	Store store.Store
	Queue queue.Queue
	Clock clock.Clock
}

// Pause stops a running job at the next item boundary (resumable).
func (c *Controller) Pause(ctx context.Context, jobID string) (store.JobView, error) {
	_, err := c.Store.TransitionJob(ctx, store.TransitionJobParams{
		JobID: jobID, From: []store.JobStatus{store.JobRunning}, To: store.JobPaused,
		PauseReason: store.PauseManual, At: c.Clock.Now(),
	})
	if err != nil {
		return store.JobView{}, mapErr(err)
	}
	return c.Store.GetJob(ctx, jobID)
}

// Resume continues a paused job (whatever paused it: manual, budget — raise
// the budget first — or breaker) and resumes its breaker-paused shards.
func (c *Controller) Resume(ctx context.Context, jobID string) (store.JobView, error) {
	now := c.Clock.Now()
	if _, err := c.Store.TransitionJob(ctx, store.TransitionJobParams{
		JobID: jobID, From: []store.JobStatus{store.JobPaused}, To: store.JobRunning, At: now,
	}); err != nil {
		return store.JobView{}, mapErr(err)
	}
	view, err := c.Store.GetJob(ctx, jobID)
	if err != nil {
		return store.JobView{}, err
	}
	for _, sh := range view.Shards {
		if sh.Status == store.ShardPaused {
			if _, err := c.Store.TransitionShard(ctx, store.TransitionShardParams{
				JobID: jobID, Index: sh.Index, From: []store.ShardStatus{store.ShardPaused}, To: store.ShardRunning, At: now,
			}); err != nil && !errors.Is(err, store.ErrInvalidTransition) {
				return store.JobView{}, fmt.Errorf("resume shard %d: %w", sh.Index, err)
			}
		}
	}
	if err := c.kickAll(ctx, view); err != nil {
		return store.JobView{}, err
	}
	return c.Store.GetJob(ctx, jobID)
}

// Cancel abandons a job's remaining items, irreversibly; nothing already
// sent is undone. Items in flight finish and are recorded.
func (c *Controller) Cancel(ctx context.Context, jobID string) (store.JobView, error) {
	if _, err := c.Store.TransitionJob(ctx, store.TransitionJobParams{
		JobID: jobID, From: []store.JobStatus{store.JobRunning, store.JobPaused}, To: store.JobCancelled, At: c.Clock.Now(),
	}); err != nil {
		return store.JobView{}, mapErr(err)
	}
	view, err := c.Store.GetJob(ctx, jobID)
	if err != nil {
		return store.JobView{}, err
	}
	if err := c.kickAll(ctx, view); err != nil {
		return store.JobView{}, err
	}
	return view, nil
}

// UpdateLimits changes a job's rate cap and/or budget; senders apply it at
// their next batch. Raising the budget of a job paused for budget does not
// resume it: resume is the operator's confirmation.
func (c *Controller) UpdateLimits(ctx context.Context, jobID string, ratePerSec *float64, budget *int64) (store.JobView, error) {
	if ratePerSec != nil && *ratePerSec < 0 || budget != nil && *budget < 0 {
		return store.JobView{}, fmt.Errorf("%w: rate and budget must be >= 0", store.ErrInvalidArgument)
	}
	if _, err := c.Store.UpdateJobLimits(ctx, store.UpdateJobLimitsParams{JobID: jobID, RatePerSec: ratePerSec, Budget: budget}); err != nil {
		return store.JobView{}, err
	}
	return c.Store.GetJob(ctx, jobID)
}

func (c *Controller) kickAll(ctx context.Context, view store.JobView) error {
	for _, sh := range view.Shards {
		if store.ShardFinal(sh.Status) {
			continue
		}
		if err := dispatch.Send(ctx, c.Queue, dispatch.Turn{JobID: view.Job.ID, Shard: sh.Index, Turn: sh.Turn + 1}); err != nil {
			return err
		}
	}
	return nil
}

func mapErr(err error) error {
	if errors.Is(err, store.ErrInvalidTransition) {
		return fmt.Errorf("%w: %w", ErrNotAllowed, err)
	}
	return err
}
