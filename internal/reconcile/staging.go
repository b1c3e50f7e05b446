package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

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
		if err != nil && !errors.Is(err, store.ErrInvalidTransition) {
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
