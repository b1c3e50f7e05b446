package store

import (
	"context"
	"time"
)

// Staged submission (DESIGN.md, "Staged submission"): a job too large for
// one request is created in status JobStaging, its recipients uploaded in
// numbered parts, and started; planning (dedupe across parts, suppression,
// shards, the item snapshot) then runs in the background while the job is
// JobStarting, checkpointing its progress in a PlanState.

// MaxPartNumber is the highest part number of a staged job.
const MaxPartNumber = 10_000

// StagingStore is the staged-submission aggregate of the store port: the
// uploaded parts of staging jobs, the planning checkpoint of starting
// jobs, and the step that installs a planned job's shards. A port of its
// own beside Store (as WebhookStore), so that its consumers (the API's
// staged routes, the planner, the reconciler's expiry) name only what they
// use; both adapters implement it and storetest proves them.
type StagingStore interface {
	// PutPart stores a part of a staging job. A part already stored with
	// the same Hash is left as it is (Created false); with another Hash,
	// ErrConflict and nothing changes. The data is opaque to the store
	// (adapters split it as their records require).
	PutPart(ctx context.Context, p Part) (PutPartResult, error)
	// ListParts lists a job's parts, without their data, by number.
	ListParts(ctx context.Context, jobID string) ([]PartInfo, error)
	// ReadPart reads a part's data (ErrNotFound).
	ReadPart(ctx context.Context, jobID string, number int) ([]byte, error)
	// DeleteParts removes a job's parts and its planning checkpoint (none:
	// no error).
	DeleteParts(ctx context.Context, jobID string) error

	// GetPlanState reads a starting job's planning checkpoint (ErrNotFound).
	GetPlanState(ctx context.Context, jobID string) (PlanState, error)
	// SavePlanState stores a checkpoint if the stored one's Version is
	// still p.Version (0 = none stored yet) and returns it with Version +
	// 1; anything else is ErrConflict and nothing changes.
	SavePlanState(ctx context.Context, p PlanState) (PlanState, error)

	// ReleasePlannedJob installs the shards of a planned job and moves it
	// from JobStarting to JobRunning (or, without shards, JobCompleted)
	// with its Total and Suppressed. A job not starting is
	// ErrInvalidTransition. A retry after a crash between the adapter's
	// writes finishes the release; shards already written are kept as
	// they are.
	ReleasePlannedJob(ctx context.Context, p ReleasePlannedJobParams) (Job, error)

	// ListStagingJobs lists jobs (all tenants) in status p.Status
	// (JobStaging, the default, or JobStarting) created before
	// p.CreatedBefore, oldest first, at most p.Limit: staging jobs for
	// expiry, starting ones for the planning watchdog.
	ListStagingJobs(ctx context.Context, p ListStagingJobsParams) ([]Job, error)
}

// Part is one uploaded part of a staging job.
type Part struct {
	JobID  string
	Number int // 1..MaxPartNumber
	// Hash identifies the body the part was uploaded with.
	Hash string
	// Recipients is how many recipients the part holds; Bytes the size
	// of the body uploaded.
	Recipients int
	Bytes      int64
	// Data is the part's recipients in the planner's encoding.
	Data      []byte
	CreatedAt time.Time
}

// PartInfo describes a stored part.
type PartInfo struct {
	Number     int
	Hash       string
	Recipients int
	Bytes      int64
	CreatedAt  time.Time
}

// PutPartResult is the part standing for the upload.
type PutPartResult struct {
	Part    PartInfo
	Created bool // false: the same part with the same hash was there
}

// PlanState is a planning checkpoint, opaque to the store.
type PlanState struct {
	JobID   string
	Version int64
	State   []byte
}

// ReleasePlannedJobParams releases a planned job.
type ReleasePlannedJobParams struct {
	JobID      string
	Shards     []Shard // indexes 0..n-1, each once
	Total      int64
	Suppressed int64
	At         time.Time
}

// ListStagingJobsParams selects staging jobs.
type ListStagingJobsParams struct {
	// Status is JobStaging (also when empty) or JobStarting.
	Status        JobStatus
	CreatedBefore time.Time
	Limit         int // 0 = 100
}
