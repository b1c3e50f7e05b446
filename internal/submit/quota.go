package submit

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// Quota names, as the API and the platform operator spell them.
const (
	QuotaRunningJobs      = "max_running_jobs"
	QuotaRecipientsPerDay = "max_recipients_per_day"
)

// RunningJobsRetryAfter is what a job refused for the running-jobs quota
// is told to wait: jobs end at no known time, so a minute.
const RunningJobsRetryAfter = time.Minute

// QuotaError refuses a job over its tenant's quota (issue 12): nothing was
// stored. RetryAfter says when trying again may succeed: for the daily
// recipients quota, the next UTC day.
type QuotaError struct {
	Quota      string // QuotaRunningJobs or QuotaRecipientsPerDay
	Max        int64
	Current    int64 // active jobs, or recipients accepted today
	Requested  int64 // recipients of the refused job (daily quota)
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	if e.Quota == QuotaRunningJobs {
		return fmt.Sprintf("the tenant has %d active jobs, its quota %s is %d", e.Current, e.Quota, e.Max)
	}
	return fmt.Sprintf("the tenant accepted %d recipients today; %d more would pass its quota %s of %d",
		e.Current, e.Requested, e.Quota, e.Max)
}

func (s *Submitter) quotas() store.QuotaStore {
	if s.Quotas != nil {
		return s.Quotas
	}
	qs, _ := s.Store.(store.QuotaStore)
	return qs
}

// reserveQuota checks the tenant's running-jobs quota and adds recipients
// to its daily counter. The returned release gives the recipients back
// (when the job is not created after all); it is never nil.
func (s *Submitter) reserveQuota(ctx context.Context, tenant string, recipients int64) (release func(context.Context), err error) {
	none := func(context.Context) {}
	qs := s.quotas()
	if qs == nil {
		return none, nil
	}
	q, err := qs.GetQuota(ctx, tenant)
	if err != nil {
		return none, fmt.Errorf("read quota: %w", err)
	}
	if q.MaxRunningJobs > 0 {
		n, err := qs.CountActiveJobs(ctx, tenant, int(q.MaxRunningJobs))
		if err != nil {
			return none, fmt.Errorf("count active jobs: %w", err)
		}
		if int64(n) >= q.MaxRunningJobs {
			return none, &QuotaError{Quota: QuotaRunningJobs, Max: q.MaxRunningJobs, Current: int64(n), RetryAfter: RunningJobsRetryAfter}
		}
	}
	if q.MaxRecipientsPerDay <= 0 || recipients <= 0 {
		return none, nil
	}
	now := s.Clock.Now().UTC()
	day := store.QuotaDay(now)
	res, err := qs.AddRecipients(ctx, store.AddRecipientsParams{Tenant: tenant, Day: day, N: recipients, Max: q.MaxRecipientsPerDay})
	if err != nil {
		return none, fmt.Errorf("count recipients: %w", err)
	}
	if !res.Added {
		tomorrow := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
		return none, &QuotaError{Quota: QuotaRecipientsPerDay, Max: q.MaxRecipientsPerDay, Current: res.Total,
			Requested: recipients, RetryAfter: tomorrow.Sub(now)}
	}
	return func(ctx context.Context) {
		if _, err := qs.AddRecipients(ctx, store.AddRecipientsParams{Tenant: tenant, Day: day, N: -recipients}); err != nil {
			s.logger().Warn("give back the recipients of a job not created", slog.String("tenant", tenant), slog.Any("err", err))
		}
	}, nil
}
