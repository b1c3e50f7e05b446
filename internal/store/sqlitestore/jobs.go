package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// Default and largest page sizes of the list methods.
const (
	defaultJobsLimit  = 50
	defaultItemsLimit = 100
	maxListLimit      = 1000
)

const jobCols = `no, id, tenant, idem_key, request_hash, name, template, status, pause_reason,
total, suppressed, shard_count, budget, budget_used, rate_per_sec, created_by,
created_at, started_at, finished_at, meta, metadata, canary, canary_ok, canary_confirmed, canary_failed`

// scanJob reads a row of jobCols.
func scanJob(row interface{ Scan(...any) error }) (int64, store.Job, error) {
	var (
		j                          store.Job
		no                         int64
		status, reason             string
		created, started, finished int64
		meta, metadata             sql.NullString
	)
	err := row.Scan(&no, &j.ID, &j.Tenant, &j.IdempotencyKey, &j.RequestHash, &j.Name, &j.Template,
		&status, &reason, &j.Total, &j.Suppressed, &j.ShardCount, &j.Budget, &j.BudgetUsed,
		&j.RatePerSec, &j.CreatedBy, &created, &started, &finished, &meta, &metadata,
		&j.Canary, &j.CanaryApproved, &j.CanaryConfirmed, &j.CanaryFailed)
	if err != nil {
		return 0, j, err
	}
	j.Status = store.JobStatus(status)
	j.PauseReason = store.PauseReason(reason)
	j.CreatedAt = fromNanos(created)
	j.StartedAt = fromNanos(started)
	j.FinishedAt = fromNanos(finished)
	if meta.Valid && meta.String != "" {
		if err := json.Unmarshal([]byte(meta.String), &j.Meta); err != nil {
			return 0, j, fmt.Errorf("decode job meta: %w", err)
		}
	}
	if metadata.Valid && metadata.String != "" {
		if err := json.Unmarshal([]byte(metadata.String), &j.Metadata); err != nil {
			return 0, j, fmt.Errorf("decode job metadata: %w", err)
		}
	}
	return no, j, nil
}

func (s *Store) getJob(ctx context.Context, q querier, jobID string) (int64, store.Job, error) {
	no, j, err := scanJob(q.QueryRowContext(ctx, `SELECT `+jobCols+` FROM jobs WHERE id = ?`, jobID))
	if errors.Is(err, sql.ErrNoRows) {
		return 0, j, fmt.Errorf("job %q: %w", jobID, store.ErrNotFound)
	}
	if err != nil {
		return 0, j, fmt.Errorf("read job %q: %w", jobID, err)
	}
	return no, j, nil
}

// CreateJob stores a new job (status creating) with its shards and its
// idempotency record, or returns the job already created for the same
// tenant, key and request hash.
func (s *Store) CreateJob(ctx context.Context, p store.CreateJobParams) (store.CreateJobResult, error) {
	j := p.Job
	if j.ID == "" || j.Tenant == "" {
		return store.CreateJobResult{}, fmt.Errorf("create job: %w: empty id or tenant", store.ErrInvalidArgument)
	}
	if j.Total < 0 || j.Budget < 0 || j.RatePerSec < 0 || j.Suppressed < 0 {
		return store.CreateJobResult{}, fmt.Errorf("create job %q: %w: negative total, budget or rate", j.ID, store.ErrInvalidArgument)
	}
	seen := make(map[int]bool, len(p.Shards))
	for _, sh := range p.Shards {
		if sh.Index < 0 || sh.Index >= len(p.Shards) || seen[sh.Index] {
			return store.CreateJobResult{}, fmt.Errorf("create job %q: %w: shard indexes must be 0..%d, each once", j.ID, store.ErrInvalidArgument, len(p.Shards)-1)
		}
		if sh.Size < 0 {
			return store.CreateJobResult{}, fmt.Errorf("create job %q: %w: negative shard size", j.ID, store.ErrInvalidArgument)
		}
		seen[sh.Index] = true
	}
	if j.Status != store.JobStaging || len(p.Shards) > 0 {
		j.Status = store.JobCreating
	}
	j.PauseReason = ""
	j.ShardCount = len(p.Shards)
	j.BudgetUsed = 0
	j.StartedAt, j.FinishedAt = time.Time{}, time.Time{}
	if !j.CreatedAt.IsZero() {
		j.CreatedAt = fromNanos(toNanos(j.CreatedAt))
	}
	var meta any
	if len(j.Meta) > 0 {
		b, err := json.Marshal(j.Meta)
		if err != nil {
			return store.CreateJobResult{}, fmt.Errorf("create job %q: encode meta: %w", j.ID, err)
		}
		meta = string(b)
	}
	var metadata any
	if len(j.Metadata) > 0 {
		b, err := json.Marshal(j.Metadata)
		if err != nil {
			return store.CreateJobResult{}, fmt.Errorf("create job %q: encode metadata: %w", j.ID, err)
		}
		metadata = string(b)
	}

	var res store.CreateJobResult
	err := s.write(ctx, func(tx *sql.Tx) error {
		if j.IdempotencyKey != "" {
			_, old, err := scanJob(tx.QueryRowContext(ctx,
				`SELECT `+jobCols+` FROM jobs WHERE tenant = ? AND idem_key = ? AND idem_key <> ''`, j.Tenant, j.IdempotencyKey))
			switch {
			case err == nil:
				if old.RequestHash != j.RequestHash {
					return fmt.Errorf("create job: idempotency key %q used with another request: %w", j.IdempotencyKey, store.ErrConflict)
				}
				res = store.CreateJobResult{Job: old}
				return nil
			case !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("create job: look up idempotency key: %w", err)
			}
		}
		r, err := tx.ExecContext(ctx, `INSERT INTO jobs (id, tenant, idem_key, request_hash, name, template,
status, pause_reason, total, suppressed, shard_count, budget, budget_used, rate_per_sec, created_by,
created_at, started_at, finished_at, meta, metadata, canary) VALUES (?, ?, ?, ?, ?, ?, ?, '', ?, ?, ?, ?, 0, ?, ?, ?, 0, 0, ?, ?, ?)`,
			j.ID, j.Tenant, j.IdempotencyKey, j.RequestHash, j.Name, j.Template, string(j.Status),
			j.Total, j.Suppressed, j.ShardCount, j.Budget, j.RatePerSec, j.CreatedBy, toNanos(j.CreatedAt), meta, metadata, j.Canary)
		if err != nil {
			return fmt.Errorf("create job %q: %w", j.ID, mapErr(err))
		}
		no, err := r.LastInsertId()
		if err != nil {
			return fmt.Errorf("create job %q: %w", j.ID, err)
		}
		for _, sh := range p.Shards {
			if err := insertShard(ctx, tx, no, sh, false); err != nil {
				return fmt.Errorf("create job %q: %w", j.ID, err)
			}
		}
		res = store.CreateJobResult{Job: j, Created: true}
		return nil
	})
	if err != nil {
		return store.CreateJobResult{}, err
	}
	return res, nil
}

// PutItems writes one page of a creating job's item snapshot.
func (s *Store) PutItems(ctx context.Context, p store.PutItemsParams) error {
	if len(p.Items) > store.MaxPutItems {
		return fmt.Errorf("put items: %w: %d items, at most %d", store.ErrInvalidArgument, len(p.Items), store.MaxPutItems)
	}
	for _, it := range p.Items {
		if it.Seq < 0 {
			return fmt.Errorf("put items: %w: negative seq %d", store.ErrInvalidArgument, it.Seq)
		}
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		no, job, err := s.getJob(ctx, tx, p.JobID)
		if err != nil {
			return fmt.Errorf("put items: %w", err)
		}
		if job.Status != store.JobCreating && job.Status != store.JobStarting {
			return fmt.Errorf("put items into job %q in status %s: %w", p.JobID, job.Status, store.ErrInvalidTransition)
		}
		byShard := map[int][]flat{}
		for _, it := range p.Items {
			if it.Shard < 0 || (it.Shard >= job.ShardCount && job.Status == store.JobCreating) {
				return fmt.Errorf("put item %d: %w: shard %d of %d", it.Seq, store.ErrInvalidArgument, it.Shard, job.ShardCount)
			}
			byShard[it.Shard] = append(byShard[it.Shard], flat{
				st: runState{status: codePending, account: it.Account, ref: it.Ref},
				e:  entry{seq: it.Seq, to: it.To, vars: encodeVars(it.Vars)},
			})
		}
		shards := slices.Sorted(maps.Keys(byShard))
		for _, sh := range shards {
			if err := s.putShardItems(ctx, tx, no, sh, byShard[sh]); err != nil {
				return fmt.Errorf("put items of job %q: %w", p.JobID, err)
			}
		}
		return nil
	})
}

// putShardItems writes new items of a shard (as pending, never claimed),
// replacing the items of the same seqs. The runs they overlap are formed
// again with them, so that a page written again with other boundaries
// (planning resumed after a crash) leaves exactly one item per seq; the
// run just before them, if of the same state, takes them in too, so that
// a shard whose items come a few per page still gets long runs.
func (s *Store) putShardItems(ctx context.Context, tx *sql.Tx, no int64, shard int, put []flat) error {
	bySeq := func(a, b flat) int { return cmpInt(a.e.seq, b.e.seq) }
	if !slices.IsSortedFunc(put, bySeq) {
		slices.SortStableFunc(put, bySeq)
	}
	// Of items given twice, the last given stands.
	dedup := put[:0]
	for _, f := range put {
		if len(dedup) > 0 && dedup[len(dedup)-1].e.seq == f.e.seq {
			dedup[len(dedup)-1] = f
			continue
		}
		dedup = append(dedup, f)
	}
	put = dedup
	lo, hi := put[0].e.seq, put[len(put)-1].e.seq
	// The run starting last at or before lo (holding lo, or just before
	// it), then those starting after lo up to hi.
	old := make([]run, 0, 4)
	r, err := scanRun(s.stmt(ctx, tx, qRunAt).QueryRowContext(ctx, no, shard, lo))
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	default:
		old = append(old, r)
	}
	if lo < hi {
		rows, err := s.stmt(ctx, tx, qRunsFrom).QueryContext(ctx, no, shard, lo+1, hi)
		if err != nil {
			return err
		}
		for rows.Next() {
			r, err := scanRun(rows)
			if err != nil {
				_ = rows.Close()
				return err
			}
			old = append(old, r)
		}
		if err := rows.Close(); err != nil {
			return err
		}
	}
	var before []flat // the items of the run before lo taking them in
	merged := put
	overlap := false
	for _, r := range old {
		if r.last() < lo {
			if r.st == put[0].st && len(r.items) < runMax && lo-r.first() <= runSpan {
				before = r.flatten(make([]flat, 0, len(r.items)+len(put)))
				if err := s.deleteRun(ctx, tx, no, shard, r.first()); err != nil {
					return err
				}
			}
			continue
		}
		if err := s.deleteRun(ctx, tx, no, shard, r.first()); err != nil {
			return err
		}
		if !overlap {
			merged, overlap = slices.Clone(put), true
		}
		for _, e := range r.items {
			if _, given := slices.BinarySearchFunc(put, e.seq, func(f flat, seq int64) int { return cmpInt(f.e.seq, seq) }); !given {
				merged = append(merged, flat{st: r.st, e: e})
			}
		}
	}
	if overlap {
		slices.SortFunc(merged, bySeq)
	}
	if before != nil {
		merged = append(before, merged...)
	}
	for _, r := range formRuns(shard, merged) {
		if err := s.putRun(ctx, tx, no, &r); err != nil {
			return err
		}
	}
	return nil
}

// GetJobRecord reads a job without its shards.
func (s *Store) GetJobRecord(ctx context.Context, jobID string) (store.Job, error) {
	if jobID == "" {
		return store.Job{}, fmt.Errorf("get job: %w: empty id", store.ErrInvalidArgument)
	}
	var j store.Job
	err := s.read(ctx, func(tx *sql.Tx) error {
		var err error
		_, j, err = s.getJob(ctx, tx, jobID)
		return err
	})
	return j, err
}

// GetJob reads a job and its shards from one snapshot.
func (s *Store) GetJob(ctx context.Context, jobID string) (store.JobView, error) {
	if jobID == "" {
		return store.JobView{}, fmt.Errorf("get job: %w: empty id", store.ErrInvalidArgument)
	}
	var v store.JobView
	err := s.read(ctx, func(tx *sql.Tx) error {
		no, j, err := s.getJob(ctx, tx, jobID)
		if err != nil {
			return err
		}
		v.Job = j
		rows, err := tx.QueryContext(ctx, `SELECT `+shardCols+` FROM shards s JOIN jobs j ON j.no = s.job_no
WHERE s.job_no = ? ORDER BY s.idx`, no)
		if err != nil {
			return fmt.Errorf("read shards of job %q: %w", jobID, err)
		}
		defer rows.Close()
		v.Shards = make([]store.Shard, 0, j.ShardCount)
		for rows.Next() {
			sh, err := scanShard(rows)
			if err != nil {
				return fmt.Errorf("read shards of job %q: %w", jobID, err)
			}
			v.Shards = append(v.Shards, sh)
		}
		return rows.Err()
	})
	if err != nil {
		return store.JobView{}, err
	}
	return v, nil
}

// ListJobs lists a tenant's jobs newest first.
func (s *Store) ListJobs(ctx context.Context, p store.ListJobsParams) (store.ListJobsResult, error) {
	if p.Tenant == "" {
		return store.ListJobsResult{}, fmt.Errorf("list jobs: %w: empty tenant", store.ErrInvalidArgument)
	}
	limit, err := pageLimit(p.Limit, defaultJobsLimit)
	if err != nil {
		return store.ListJobsResult{}, fmt.Errorf("list jobs: %w", err)
	}
	// (created_at, no) descending; the cursor is the last key returned.
	afterCreated, afterNo := int64(1<<63-1), int64(1<<63-1)
	if p.Cursor != "" {
		k, err := decodeCursor(p.Cursor, "j", 2)
		if err != nil {
			return store.ListJobsResult{}, fmt.Errorf("list jobs: %w", err)
		}
		afterCreated, afterNo = k[0], k[1]
	}
	var res store.ListJobsResult
	err = s.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+jobCols+` FROM jobs
WHERE tenant = ? AND (created_at, no) < (?, ?) ORDER BY created_at DESC, no DESC LIMIT ?`,
			p.Tenant, afterCreated, afterNo, limit+1)
		if err != nil {
			return fmt.Errorf("list jobs: %w", err)
		}
		defer rows.Close()
		var lastNo int64
		for rows.Next() {
			no, j, err := scanJob(rows)
			if err != nil {
				return fmt.Errorf("list jobs: %w", err)
			}
			if len(res.Jobs) == limit {
				last := res.Jobs[limit-1]
				res.NextCursor = encodeCursor("j", toNanos(last.CreatedAt), lastNo)
				break
			}
			res.Jobs = append(res.Jobs, j)
			lastNo = no
		}
		return rows.Err()
	})
	if err != nil {
		return store.ListJobsResult{}, err
	}
	return res, nil
}

// pageLimit validates a list limit, applying the default for 0.
func pageLimit(limit, def int) (int, error) {
	switch {
	case limit < 0:
		return 0, fmt.Errorf("%w: negative limit", store.ErrInvalidArgument)
	case limit == 0:
		return def, nil
	case limit > maxListLimit:
		return maxListLimit, nil
	}
	return limit, nil
}

// TransitionJob changes a job's status along the allowed transitions.
func (s *Store) TransitionJob(ctx context.Context, p store.TransitionJobParams) (store.Job, error) {
	var out store.Job
	err := s.write(ctx, func(tx *sql.Tx) error {
		no, j, err := s.getJob(ctx, tx, p.JobID)
		if err != nil {
			return fmt.Errorf("transition job: %w", err)
		}
		if (len(p.From) > 0 && !slices.Contains(p.From, j.Status)) || !store.JobTransitionAllowed(j.Status, p.To) {
			return fmt.Errorf("job %q from %s to %s: %w", p.JobID, j.Status, p.To, store.ErrInvalidTransition)
		}
		if p.FromPauseReason != "" && (j.Status != store.JobPaused || j.PauseReason != p.FromPauseReason) {
			return fmt.Errorf("job %q is not paused for %s: %w", p.JobID, p.FromPauseReason, store.ErrInvalidTransition)
		}
		if p.ApproveCanary && j.Status == store.JobPaused && j.PauseReason == store.PauseCanary {
			j.CanaryApproved, j.CanaryConfirmed, j.CanaryFailed = true, p.CanaryConfirmed, p.CanaryFailed
		}
		j.Status = p.To
		j.PauseReason = ""
		if p.To == store.JobPaused {
			j.PauseReason = p.PauseReason
		}
		at := fromNanos(toNanos(p.At))
		if p.To == store.JobRunning && j.StartedAt.IsZero() {
			j.StartedAt = at
		}
		if store.JobFinal(p.To) {
			j.FinishedAt = at
		} else {
			j.FinishedAt = time.Time{}
		}
		_, err = tx.ExecContext(ctx, `UPDATE jobs SET status = ?, pause_reason = ?, started_at = ?, finished_at = ?,
canary_ok = ?, canary_confirmed = ?, canary_failed = ? WHERE no = ?`,
			string(j.Status), string(j.PauseReason), toNanos(j.StartedAt), toNanos(j.FinishedAt),
			j.CanaryApproved, j.CanaryConfirmed, j.CanaryFailed, no)
		if err != nil {
			return fmt.Errorf("transition job %q: %w", p.JobID, err)
		}
		out = j
		return nil
	})
	return out, err
}

// UpdateJobLimits changes a job's rate cap and/or budget.
func (s *Store) UpdateJobLimits(ctx context.Context, p store.UpdateJobLimitsParams) (store.Job, error) {
	if (p.RatePerSec != nil && *p.RatePerSec < 0) || (p.Budget != nil && *p.Budget < 0) {
		return store.Job{}, fmt.Errorf("update job limits: %w: negative rate or budget", store.ErrInvalidArgument)
	}
	var out store.Job
	err := s.write(ctx, func(tx *sql.Tx) error {
		no, j, err := s.getJob(ctx, tx, p.JobID)
		if err != nil {
			return fmt.Errorf("update job limits: %w", err)
		}
		if store.JobFinal(j.Status) {
			return fmt.Errorf("update job limits of %q: %w: the job is %s", p.JobID, store.ErrInvalidTransition, j.Status)
		}
		if p.RatePerSec != nil {
			j.RatePerSec = *p.RatePerSec
		}
		if p.Budget != nil {
			j.Budget = *p.Budget
		}
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET rate_per_sec = ?, budget = ? WHERE no = ?`, j.RatePerSec, j.Budget, no); err != nil {
			return fmt.Errorf("update job limits %q: %w", p.JobID, err)
		}
		out = j
		return nil
	})
	return out, err
}

// ReserveBudget adds n to the job's used budget, never beyond the budget,
// and returns what was granted (for n < 0, what was given back, never
// below zero used) with the usage after it.
func (s *Store) ReserveBudget(ctx context.Context, jobID string, n int64) (store.BudgetGrant, error) {
	var out store.BudgetGrant
	err := s.write(ctx, func(tx *sql.Tx) error {
		no, j, err := s.getJob(ctx, tx, jobID)
		if err != nil {
			return fmt.Errorf("reserve budget: %w", err)
		}
		granted := n
		switch {
		case n > 0 && j.Budget > 0:
			granted = max(0, min(n, j.Budget-j.BudgetUsed))
		case n < 0:
			granted = max(n, -j.BudgetUsed)
		}
		out = store.BudgetGrant{Granted: granted, Used: j.BudgetUsed + granted, Budget: j.Budget}
		if granted == 0 {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET budget_used = budget_used + ? WHERE no = ?`, granted, no); err != nil {
			return fmt.Errorf("reserve budget of job %q: %w", jobID, err)
		}
		return nil
	})
	if err != nil {
		return store.BudgetGrant{}, err
	}
	return out, nil
}

// nullString stores "" as NULL, so partial indexes on the column skip it.
func nullString(v string) any {
	if v == "" {
		return nil
	}
	return v
}

// insertShard writes a new shard of the job numbered no (orIgnore: keep a
// shard already written).
func insertShard(ctx context.Context, tx *sql.Tx, no int64, sh store.Shard, orIgnore bool) error {
	st := sh.Status
	if st == "" {
		st = store.ShardPending
	}
	counts := sh.Counts
	if counts.IsZero() {
		counts = store.Counts{Pending: sh.Size}
	}
	slow := sh.SlowFactor
	if slow <= 0 {
		slow = 1
	}
	verb := "INSERT"
	if orIgnore {
		verb = "INSERT OR IGNORE"
	}
	_, err := tx.ExecContext(ctx, verb+` INTO shards (job_no, idx, account, status, pause_reason, size,
cursor, last_adv, n_pending, n_submitted, n_confirmed, n_failed, n_abandoned, failures, slow_factor,
turn, turn_message, dirty, epoch, attempts, attempt_failures)
VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, 0, '', 0, ?, ?, ?)`,
		no, sh.Index, sh.Account, string(st), string(sh.PauseReason), sh.Size, toNanos(sh.LastAdvancedAt),
		counts.Pending, counts.Submitted, counts.Confirmed, counts.Failed, counts.Abandoned,
		encodeFailures(sh.Failures), slow, sh.Epoch, sh.Attempts, sh.AttemptFailures)
	if err != nil {
		return fmt.Errorf("shard %d: %w", sh.Index, err)
	}
	return nil
}

var _ store.IdempotencyLookup = (*Store)(nil)

// JobByIdempotencyKey returns the job a tenant's idempotency key made.
func (s *Store) JobByIdempotencyKey(ctx context.Context, tenant, key string) (store.Job, error) {
	if key == "" {
		return store.Job{}, fmt.Errorf("job by idempotency key: %w", store.ErrNotFound)
	}
	var j store.Job
	err := s.read(ctx, func(tx *sql.Tx) error {
		var err error
		_, j, err = scanJob(tx.QueryRowContext(ctx, `SELECT `+jobCols+` FROM jobs WHERE tenant = ? AND idem_key = ?`, tenant, key))
		return err
	})
	return j, err
}
