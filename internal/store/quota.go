package store

import (
	"context"
	"time"
)

// Quota is what the platform operator allows a tenant (DESIGN.md,
// "Tenants, roles, provider accounts"; issue 12). Zero means unlimited.
type Quota struct {
	Tenant string
	// MaxRunningJobs bounds the tenant's active jobs: starting, running
	// and paused ones (ActiveJobStatuses). Creating and staging jobs do
	// not count: they send nothing yet, and a staged job is counted when
	// it is started.
	MaxRunningJobs int64
	// MaxRecipientsPerDay bounds the recipients accepted into the tenant's
	// jobs in one UTC day.
	MaxRecipientsPerDay int64
	UpdatedAt           time.Time
}

// ActiveJobStatuses are the statuses a running-jobs quota counts.
var ActiveJobStatuses = []JobStatus{JobStarting, JobRunning, JobPaused}

// JobActive reports whether a job of status s counts against the
// running-jobs quota.
func JobActive(s JobStatus) bool {
	return s == JobStarting || s == JobRunning || s == JobPaused
}

// QuotaDay is the UTC day a daily counter of t belongs to, "2006-01-02".
func QuotaDay(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// AddRecipientsParams adds N recipients to a tenant's counter of Day
// (QuotaDay) on condition the total stays at most Max (0: no bound).
// A negative N gives recipients back (a job that was not created after
// all) and is never refused.
type AddRecipientsParams struct {
	Tenant string
	Day    string
	N      int64
	Max    int64
}

// AddRecipientsResult is the counter after the add (Added) or as it
// stood when the add was refused.
type AddRecipientsResult struct {
	Added bool
	Total int64
}

// QuotaStore keeps tenants' quotas and the counters they are checked
// against.
type QuotaStore interface {
	// PutQuota sets a tenant's quota (replacing the previous one).
	PutQuota(ctx context.Context, q Quota) error
	// GetQuota reads a tenant's quota; a tenant without one has the zero
	// Quota (unlimited), not ErrNotFound.
	GetQuota(ctx context.Context, tenant string) (Quota, error)
	// CountActiveJobs counts the tenant's jobs in ActiveJobStatuses, up
	// to limit (the count stops there; limit > 0). On DynamoDB the count
	// reads an index that may lag a write by a moment.
	CountActiveJobs(ctx context.Context, tenant string, limit int) (int, error)
	// AddRecipients adds to a tenant's daily recipients counter with one
	// conditional write.
	AddRecipients(ctx context.Context, p AddRecipientsParams) (AddRecipientsResult, error)
}
