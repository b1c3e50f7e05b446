package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.StagingStore = (*Store)(nil)

// stagingSchema is migration 7. A part's data is one row (at most a few
// MiB, read whole by the planner); the partial index keeps the expiry of
// staging jobs independent of the number of jobs that ever ran.
const stagingSchema = `
CREATE TABLE staged_parts (
	job_id      TEXT NOT NULL,
	part        INTEGER NOT NULL,
	hash        TEXT NOT NULL,
	recipients  INTEGER NOT NULL,
	bytes       INTEGER NOT NULL,
	created_at  INTEGER NOT NULL,
	data        BLOB NOT NULL,
	PRIMARY KEY (job_id, part)
);
CREATE TABLE plan_states (
	job_id   TEXT NOT NULL PRIMARY KEY,
	version  INTEGER NOT NULL,
	state    BLOB NOT NULL
);
CREATE INDEX jobs_staging ON jobs (created_at, no) WHERE status = 'staging';
`

// PutPart stores a part unless the same part is there.
func (s *Store) PutPart(ctx context.Context, p store.Part) (store.PutPartResult, error) {
	if p.JobID == "" || p.Number < 1 || p.Number > store.MaxPartNumber || p.Hash == "" || p.Recipients < 0 || p.Bytes < 0 {
		return store.PutPartResult{}, fmt.Errorf("put part: %w: job id, part 1..%d and hash are required", store.ErrInvalidArgument, store.MaxPartNumber)
	}
	var res store.PutPartResult
	err := s.write(ctx, func(tx *sql.Tx) error {
		old, err := scanPart(tx.QueryRowContext(ctx,
			`SELECT part, hash, recipients, bytes, created_at FROM staged_parts WHERE job_id = ? AND part = ?`, p.JobID, p.Number))
		switch {
		case err == nil:
			if old.Hash != p.Hash {
				return fmt.Errorf("put part %d of job %q: another body is stored: %w", p.Number, p.JobID, store.ErrConflict)
			}
			res = store.PutPartResult{Part: old}
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("put part %d of job %q: %w", p.Number, p.JobID, err)
		}
		data := p.Data
		if data == nil {
			data = []byte{}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO staged_parts (job_id, part, hash, recipients, bytes, created_at, data)
VALUES (?, ?, ?, ?, ?, ?, ?)`, p.JobID, p.Number, p.Hash, p.Recipients, p.Bytes, toNanos(p.CreatedAt), data); err != nil {
			return fmt.Errorf("put part %d of job %q: %w", p.Number, p.JobID, err)
		}
		res = store.PutPartResult{Created: true, Part: store.PartInfo{
			Number: p.Number, Hash: p.Hash, Recipients: p.Recipients, Bytes: p.Bytes, CreatedAt: fromNanos(toNanos(p.CreatedAt)),
		}}
		return nil
	})
	return res, err
}

func scanPart(row interface{ Scan(...any) error }) (store.PartInfo, error) {
	var (
		pi store.PartInfo
		at int64
	)
	if err := row.Scan(&pi.Number, &pi.Hash, &pi.Recipients, &pi.Bytes, &at); err != nil {
		return store.PartInfo{}, err
	}
	pi.CreatedAt = fromNanos(at)
	return pi, nil
}

// ListParts lists a job's parts by number.
func (s *Store) ListParts(ctx context.Context, jobID string) ([]store.PartInfo, error) {
	out := []store.PartInfo{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx,
			`SELECT part, hash, recipients, bytes, created_at FROM staged_parts WHERE job_id = ? ORDER BY part`, jobID)
		if err != nil {
			return fmt.Errorf("list parts of job %q: %w", jobID, err)
		}
		defer rows.Close()
		for rows.Next() {
			pi, err := scanPart(rows)
			if err != nil {
				return fmt.Errorf("list parts of job %q: %w", jobID, err)
			}
			out = append(out, pi)
		}
		return rows.Err()
	})
	return out, err
}

// ReadPart reads a part's data.
func (s *Store) ReadPart(ctx context.Context, jobID string, number int) ([]byte, error) {
	var data []byte
	err := s.read(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT data FROM staged_parts WHERE job_id = ? AND part = ?`, jobID, number).Scan(&data)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("part %d of job %q: %w", number, jobID, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("read part %d of job %q: %w", number, jobID, err)
		}
		return nil
	})
	return data, err
}

// DeleteParts removes a job's parts and planning checkpoint.
func (s *Store) DeleteParts(ctx context.Context, jobID string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM staged_parts WHERE job_id = ?`, jobID); err != nil {
			return fmt.Errorf("delete parts of job %q: %w", jobID, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM plan_states WHERE job_id = ?`, jobID); err != nil {
			return fmt.Errorf("delete plan of job %q: %w", jobID, err)
		}
		return nil
	})
}

// GetPlanState reads a planning checkpoint.
func (s *Store) GetPlanState(ctx context.Context, jobID string) (store.PlanState, error) {
	ps := store.PlanState{JobID: jobID}
	err := s.read(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT version, state FROM plan_states WHERE job_id = ?`, jobID).Scan(&ps.Version, &ps.State)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("plan of job %q: %w", jobID, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("read plan of job %q: %w", jobID, err)
		}
		return nil
	})
	return ps, err
}

// SavePlanState stores a checkpoint on condition of its version.
func (s *Store) SavePlanState(ctx context.Context, p store.PlanState) (store.PlanState, error) {
	if p.JobID == "" || p.Version < 0 {
		return store.PlanState{}, fmt.Errorf("save plan: %w: job id required", store.ErrInvalidArgument)
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		var r sql.Result
		var err error
		if p.Version == 0 {
			r, err = tx.ExecContext(ctx, `INSERT OR IGNORE INTO plan_states (job_id, version, state) VALUES (?, 1, ?)`, p.JobID, p.State)
		} else {
			r, err = tx.ExecContext(ctx, `UPDATE plan_states SET version = version + 1, state = ? WHERE job_id = ? AND version = ?`,
				p.State, p.JobID, p.Version)
		}
		if err != nil {
			return fmt.Errorf("save plan of job %q: %w", p.JobID, err)
		}
		if n, _ := r.RowsAffected(); n != 1 {
			return fmt.Errorf("save plan of job %q at version %d: %w", p.JobID, p.Version, store.ErrConflict)
		}
		return nil
	})
	if err != nil {
		return store.PlanState{}, err
	}
	p.Version++
	return p, nil
}

// ReleasePlannedJob installs the shards and releases the job in one
// transaction.
func (s *Store) ReleasePlannedJob(ctx context.Context, p store.ReleasePlannedJobParams) (store.Job, error) {
	seen := make(map[int]bool, len(p.Shards))
	for _, sh := range p.Shards {
		if sh.Index < 0 || sh.Index >= len(p.Shards) || seen[sh.Index] || sh.Size < 0 {
			return store.Job{}, fmt.Errorf("release job %q: %w: shard indexes must be 0..%d, each once", p.JobID, store.ErrInvalidArgument, len(p.Shards)-1)
		}
		seen[sh.Index] = true
	}
	if p.Total < 0 || p.Suppressed < 0 {
		return store.Job{}, fmt.Errorf("release job %q: %w: negative total", p.JobID, store.ErrInvalidArgument)
	}
	var out store.Job
	err := s.write(ctx, func(tx *sql.Tx) error {
		no, j, err := s.getJob(ctx, tx, p.JobID)
		if err != nil {
			return fmt.Errorf("release job: %w", err)
		}
		if j.Status != store.JobStarting {
			return fmt.Errorf("release job %q in status %s: %w", p.JobID, j.Status, store.ErrInvalidTransition)
		}
		for _, sh := range p.Shards {
			if err := insertShard(ctx, tx, no, sh, true); err != nil {
				return fmt.Errorf("release job %q: %w", p.JobID, err)
			}
		}
		at := fromNanos(toNanos(p.At))
		j.Status, j.StartedAt = store.JobRunning, at
		if len(p.Shards) == 0 {
			j.Status, j.FinishedAt = store.JobCompleted, at
		}
		j.Total, j.Suppressed, j.ShardCount = p.Total, p.Suppressed, len(p.Shards)
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET status = ?, total = ?, suppressed = ?, shard_count = ?,
started_at = ?, finished_at = ? WHERE no = ?`, string(j.Status), j.Total, j.Suppressed, j.ShardCount,
			toNanos(j.StartedAt), toNanos(j.FinishedAt), no); err != nil {
			return fmt.Errorf("release job %q: %w", p.JobID, err)
		}
		out = j
		return nil
	})
	return out, err
}

// ListStagingJobs lists staging jobs created before a time, oldest first.
func (s *Store) ListStagingJobs(ctx context.Context, p store.ListStagingJobsParams) ([]store.Job, error) {
	status, err := stagingStatus(p.Status)
	if err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	out := []store.Job{}
	err = s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+jobCols+` FROM jobs WHERE status = ? AND created_at < ?
ORDER BY created_at, no LIMIT ?`, string(status), toNanos(p.CreatedBefore), limit)
		if err != nil {
			return fmt.Errorf("list staging jobs: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			_, j, err := scanJob(rows)
			if err != nil {
				return fmt.Errorf("list staging jobs: %w", err)
			}
			out = append(out, j)
		}
		return rows.Err()
	})
	return out, err
}

// stagingStatus is the status ListStagingJobs lists.
func stagingStatus(st store.JobStatus) (store.JobStatus, error) {
	switch st {
	case "", store.JobStaging:
		return store.JobStaging, nil
	case store.JobStarting:
		return store.JobStarting, nil
	}
	return "", fmt.Errorf("list staging jobs in status %q: only staging or starting", st)
}
