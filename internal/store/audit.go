package store

import (
	"context"
	"time"
)

// AuditEntry is one state-changing API call: who made it (the token), what
// it did (method, route, path, answer) and what it touched (a job, an
// account), when.
type AuditEntry struct {
	Tenant string
	// ID orders entries of the same instant; unique within the tenant.
	ID        string
	At        time.Time
	TokenID   string
	TokenName string
	Role      Role
	Method    string
	Route     string // the route's pattern, e.g. "POST /v1/jobs/{id}/pause"
	Path      string
	Status    int
	JobID     string
	Account   string
}

// ListAuditParams pages a tenant's audit log, newest first, optionally of
// one job only.
type ListAuditParams struct {
	Tenant string
	JobID  string
	Cursor string
	Limit  int // default 50
}

// ListAuditResult is one page of the audit log.
type ListAuditResult struct {
	Entries    []AuditEntry
	NextCursor string
}

// AuditStore keeps the audit log of state-changing API calls.
type AuditStore interface {
	// AppendAudit records one entry (idempotent for the same tenant and
	// ID).
	AppendAudit(ctx context.Context, e AuditEntry) error
	// ListAudit lists entries newest first; a bad cursor is
	// ErrInvalidArgument.
	ListAudit(ctx context.Context, p ListAuditParams) (ListAuditResult, error)
}
