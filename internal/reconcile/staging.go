package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// PlanWatchdog repairs the background planning of starting jobs
// (submit.Submitter implements it).
type PlanWatchdog interface {
	RepairPlan(ctx context.Context, jobID string, staleBefore time.Time, maxRepairs int) (submit.PlanRepair, error)
}

// DefaultMaxPlanRepairs is how often the planning message of a starting
// job that makes no progress is sent again before the job fails.
const DefaultMaxPlanRepairs = 3

// watchStarting hands every starting job created before StaleAfter to the
// planning watchdog, a page per pass: planning that stopped (its message
// dead-lettered) is sent again, or the job failed, never left starting.
func (r *Reconciler) watchStarting(ctx context.Context, rep *Report) error {
	ss, ok := r.Store.(store.StagingStore)
	if !ok || r.Plans == nil {
		return nil
	}
	staleBefore := r.Clock.Now().Add(-durOr(r.StaleAfter, 2*time.Minute))
	jobs, err := ss.ListStagingJobs(ctx, store.ListStagingJobsParams{Status: store.JobStarting, CreatedBefore: staleBefore, Limit: 100})
	if err != nil {
		return fmt.Errorf("list starting jobs: %w", err)
	}
	var errs []error
	for _, j := range jobs {
		what, err := r.Plans.RepairPlan(ctx, j.ID, staleBefore, intOr(r.MaxPlanRepairs, DefaultMaxPlanRepairs))
		switch {
		case err != nil:
			errs = append(errs, err)
		case what == submit.PlanResent:
			rep.PlansResent++
		case what == submit.PlanFailed:
			rep.PlansFailed++
		}
	}
	return errors.Join(errs...)
}

// DefaultStagingTTL is how long a staged job may stay staging before it
// is cancelled and its parts discarded (DESIGN.md: 24 h).
const DefaultStagingTTL = 24 * time.Hour

// expireStaging cancels staging jobs never started within the TTL and
// discards their parts, a page per pass.
func (r *Reconciler) expireStaging(ctx context.Context, rep *Report) error {
	ss, ok := r.Store.(store.StagingStore)
	if !ok {
		return nil
	}
	now := r.Clock.Now()
	jobs, err := ss.ListStagingJobs(ctx, store.ListStagingJobsParams{CreatedBefore: now.Add(-durOr(r.StagingTTL, DefaultStagingTTL)), Limit: 100})
	if err != nil {
		return fmt.Errorf("list staging jobs: %w", err)
	}
	for _, j := range jobs {
		_, err := r.Store.TransitionJob(ctx, store.TransitionJobParams{
			JobID: j.ID, From: []store.JobStatus{store.JobStaging}, To: store.JobCancelled, At: now,
		})
		if errors.Is(err, store.ErrInvalidTransition) {
			// The job left staging since the listing. Started, its parts
			// are planning's to read and discard; cancelled, they are
			// nobody's.
			cur, gerr := r.Store.GetJobRecord(ctx, j.ID)
			if gerr != nil {
				return fmt.Errorf("expire staging job %s: %w", j.ID, gerr)
			}
			if cur.Status != store.JobCancelled {
				continue
			}
			if err := ss.DeleteParts(ctx, j.ID); err != nil {
				return fmt.Errorf("discard the parts of job %s: %w", j.ID, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("expire staging job %s: %w", j.ID, err)
		}
		if err := ss.DeleteParts(ctx, j.ID); err != nil {
			return fmt.Errorf("discard the parts of job %s: %w", j.ID, err)
		}
		rep.Expired++
		r.log().Info("staging job expired: never started", slog.String("job", j.ID), slog.Time("created_at", j.CreatedAt))
	}
	return nil
}
