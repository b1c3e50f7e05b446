package sqlitestore

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/storetest"
)

// TestConformance runs the store port's conformance suite, each subtest on
// a fresh store file of its own.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return openTemp(t, filepath.Join(t.TempDir(), "data", "store.db"))
	}, storetest.Capabilities{})
}

func openTemp(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// runningTestJob creates a running job with one shard of n items.
func runningTestJob(t *testing.T, s *Store, id string, n int) {
	t.Helper()
	p, items := storetest.NewJob("tenant", 1, n)
	p.Job.ID = id
	p.Job.IdempotencyKey = "key-" + id
	for i := range p.Shards {
		p.Shards[i].JobID = id
	}
	for i := range items {
		items[i].JobID = id
	}
	if _, err := s.CreateJob(t.Context(), p); err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	for start := 0; start < len(items); start += store.MaxPutItems {
		if err := s.PutItems(t.Context(), store.PutItemsParams{JobID: id, Items: items[start:min(start+store.MaxPutItems, len(items))]}); err != nil {
			t.Fatalf("PutItems: %v", err)
		}
	}
	if _, err := s.TransitionJob(t.Context(), store.TransitionJobParams{JobID: id, To: store.JobRunning, At: storetest.Epoch}); err != nil {
		t.Fatalf("TransitionJob: %v", err)
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "nested", "dir", "store.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	runningTestJob(t, s, "job-1", 10)
	c, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "job-1", Max: 4, Now: storetest.Epoch, ClaimID: "c"})
	if err != nil || len(c.Items) != 4 {
		t.Fatalf("ClaimItems = %d items, %v", len(c.Items), err)
	}
	if _, err := s.TakeTokens(ctx, store.TakeTokensParams{Bucket: "b", Want: 3, RatePerSec: 1, Burst: 5, Now: storetest.Epoch}); err != nil {
		t.Fatalf("TakeTokens: %v", err)
	}
	before, err := s.GetJob(ctx, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s = openTemp(t, path)
	after, err := s.GetJob(ctx, "job-1")
	if err != nil {
		t.Fatalf("GetJob after reopen: %v", err)
	}
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("job changed across reopen:\n%+v\n%+v", before, after)
	}
	res, err := s.ListItems(ctx, store.ListItemsParams{JobID: "job-1", Status: store.ItemSubmitted})
	if err != nil || len(res.Items) != 4 || res.Items[0].ClaimID != "c" {
		t.Fatalf("submitted items after reopen = %+v, %v", res.Items, err)
	}
	// The bucket kept its 2 tokens: 3 wanted, 2 granted.
	tk, err := s.TakeTokens(ctx, store.TakeTokensParams{Bucket: "b", Want: 3, RatePerSec: 1, Burst: 5, Now: storetest.Epoch})
	if err != nil || tk.Granted != 2 || tk.RetryAfter != time.Second {
		t.Fatalf("TakeTokens after reopen = %+v, %v; want 2 granted, retry after 1s", tk, err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "store.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(t.Context(), fmt.Sprintf("PRAGMA user_version = %d", schemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(t.Context(), path); err == nil {
		_ = s.Close()
		t.Fatalf("Open of a file with a newer schema succeeded")
	}
}

// TestTwoHandlesOneFile claims one shard through two stores opened on the
// same file, as two processes would: no item is returned twice, none is
// lost.
func TestTwoHandlesOneFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "store.db")
	a := openTemp(t, path)
	b := openTemp(t, path)
	const n = 600
	runningTestJob(t, a, "job-1", n)

	var (
		mu    sync.Mutex
		owner = map[int64]string{}
		errs  = make([]error, 4)
		wg    sync.WaitGroup
	)
	for g := range 4 {
		s := []*Store{a, b}[g%2]
		wg.Go(func() {
			for k := 0; ; k++ {
				claimID := fmt.Sprintf("g%d-%d", g, k)
				c, err := s.ClaimItems(t.Context(), store.ClaimItemsParams{JobID: "job-1", Max: 7, Now: storetest.Epoch, ClaimID: claimID})
				if err != nil {
					errs[g] = err
					return
				}
				if len(c.Items) == 0 {
					return
				}
				mu.Lock()
				for _, it := range c.Items {
					if prev, dup := owner[it.Seq]; dup {
						errs[g] = fmt.Errorf("seq %d claimed by %s and %s", it.Seq, prev, claimID)
					}
					owner[it.Seq] = claimID
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if len(owner) != n {
		t.Fatalf("%d distinct items claimed, want %d", len(owner), n)
	}
}

func TestMalformedCursor(t *testing.T) {
	t.Parallel()
	s := openTemp(t, filepath.Join(t.TempDir(), "store.db"))
	runningTestJob(t, s, "job-1", 3)
	ctx := t.Context()
	itemsCursor, err := s.ListItems(ctx, store.ListItemsParams{JobID: "job-1", Limit: 1})
	if err != nil || itemsCursor.NextCursor == "" {
		t.Fatalf("ListItems(limit 1) = %+v, %v", itemsCursor, err)
	}
	for _, c := range []string{"%%%", "aGVsbG8", itemsCursor.NextCursor} {
		if _, err := s.ListJobs(ctx, store.ListJobsParams{Tenant: "tenant", Cursor: c}); !errors.Is(err, store.ErrInvalidArgument) {
			t.Fatalf("ListJobs(cursor %q) error = %v, want ErrInvalidArgument", c, err)
		}
	}
	if _, err := s.ListItems(ctx, store.ListItemsParams{JobID: "job-1", Cursor: "%%%"}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("ListItems(bad cursor) error = %v, want ErrInvalidArgument", err)
	}
	if _, err := s.ListSubmittedItems(ctx, store.ListSubmittedItemsParams{SubmittedBefore: storetest.Epoch, Cursor: itemsCursor.NextCursor}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("ListSubmittedItems(items cursor) error = %v, want ErrInvalidArgument", err)
	}
}

func TestUnknownShard(t *testing.T) {
	t.Parallel()
	s := openTemp(t, filepath.Join(t.TempDir(), "store.db"))
	runningTestJob(t, s, "job-1", 3)
	ctx := t.Context()
	if _, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "job-1", Index: 5, Max: 1, Now: storetest.Epoch, ClaimID: "c"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ClaimItems(unknown shard) error = %v, want ErrNotFound", err)
	}
	if _, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "job-1", Index: 5, Updates: []store.ItemUpdate{{Seq: 1, From: store.ItemPending, To: store.ItemAbandoned}}}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("UpdateItems(unknown shard) error = %v, want ErrNotFound", err)
	}
	if _, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "nope", Max: 1, Now: storetest.Epoch, ClaimID: "c"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ClaimItems(unknown job) error = %v, want ErrNotFound", err)
	}
	if _, err := s.ClaimItems(ctx, store.ClaimItemsParams{JobID: "job-1", Max: 0, Now: storetest.Epoch, ClaimID: "c"}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("ClaimItems(Max 0) error = %v, want ErrInvalidArgument", err)
	}
}

// TestMigrateFromVersion1 opens a file written by schema version 1 (no
// count epochs): its shards get epoch 0 and fold deltas of epoch 0, and a
// recount moves them on.
func TestMigrateFromVersion1(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "store.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{schema, "PRAGMA user_version = 1",
		`INSERT INTO jobs (no, id, tenant, idem_key, request_hash, name, template, status, pause_reason, total,
suppressed, shard_count, budget, budget_used, rate_per_sec, created_by, created_at, started_at, finished_at, meta)
VALUES (1, 'job-1', 'tenant', 'k', 'h', 'n', 't', 'running', '', 2, 0, 1, 0, 0, 0, 'me', 1, 1, 0, NULL)`,
		`INSERT INTO shards (job_no, idx, account, status, pause_reason, size, cursor, last_adv, n_pending,
n_submitted, n_confirmed, n_failed, n_abandoned, failures, slow_factor, turn, turn_message, dirty)
VALUES (1, 0, 'acct', 'running', '', 2, 0, 1, 2, 0, 0, 0, 0, NULL, 1, 3, 'm3', 0)`,
		`INSERT INTO items (job_no, shard, seq, status, attempts, next_at, sub_at, claim, cat, code, msg, account, to_id, vars)
VALUES (1, 0, 1, 0, 0, 0, 0, '', NULL, NULL, NULL, 'acct', 'u1', NULL), (1, 0, 2, 2, 1, 0, 0, '', NULL, NULL, NULL, 'acct', 'u2', NULL)`,
	} {
		if _, err := old.ExecContext(ctx, q); err != nil {
			t.Fatalf("write version 1 file: %v", err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s := openTemp(t, path)
	var v int
	if err := s.w.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("schema version after Open = %d, %v; want %d", v, err, schemaVersion)
	}
	sh, err := s.GetShard(ctx, "job-1", 0)
	if err != nil || sh.Epoch != 0 || sh.Turn != 3 || sh.Counts != (store.Counts{Pending: 2}) {
		t.Fatalf("migrated shard = %+v, %v; want epoch 0, turn 3, 2 pending", sh, err)
	}
	// The stored counts are wrong (item 2 is confirmed): a delta of epoch
	// 0 is folded as is, a recount fixes them and moves the epoch.
	sh, err = s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: "job-1", Turn: 3, Epoch: 0, Delta: store.Counts{Pending: -1, Submitted: 1}})
	if err != nil || sh.Counts != (store.Counts{Pending: 1, Submitted: 1}) || sh.Epoch != 0 {
		t.Fatalf("AdvanceShard(epoch 0) on a migrated shard = %+v, %v", sh, err)
	}
	sh, err = s.RecountShard(ctx, "job-1", 0)
	if err != nil || sh.Counts != (store.Counts{Pending: 1, Confirmed: 1}) || sh.Epoch != 1 {
		t.Fatalf("RecountShard on a migrated shard = %+v, %v; want 1 pending, 1 confirmed, epoch 1", sh, err)
	}
}

// TestTakeTokensEmptyBucketReadsOnly polls an empty bucket while another
// transaction holds the write lock: a poll that grants nothing must not
// wait for the lock.
func TestTakeTokensEmptyBucketReadsOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openTemp(t, filepath.Join(t.TempDir(), "store.db"))
	p := store.TakeTokensParams{Bucket: "b", Want: 5, RatePerSec: 1, Burst: 5, Now: storetest.Epoch}
	if res, err := s.TakeTokens(ctx, p); err != nil || res.Granted != 5 {
		t.Fatalf("TakeTokens(full bucket) = %+v, %v", res, err)
	}
	tx, err := s.w.BeginTx(ctx, nil) // holds the only write connection
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	p.Now = storetest.Epoch.Add(500 * time.Millisecond)
	done := make(chan struct{})
	var (
		res  store.TakeTokensResult
		terr error
	)
	go func() {
		defer close(done)
		res, terr = s.TakeTokens(ctx, p)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("TakeTokens of an empty bucket waited for the write lock")
	}
	if terr != nil || res.Granted != 0 || res.RetryAfter != 500*time.Millisecond {
		t.Fatalf("TakeTokens(empty bucket) = %+v, %v; want 0 granted, retry after 500ms", res, terr)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	p.Now = storetest.Epoch.Add(2 * time.Second)
	if res, err := s.TakeTokens(ctx, p); err != nil || res.Granted != 2 {
		t.Fatalf("TakeTokens after 2s = %+v, %v; want 2 granted", res, err)
	}
}

// TestMigrateFromVersion2 opens a file written by schema version 2 (before
// the operations features): its shards get zero attempt counters, a shard
// already paused by its breaker becomes visible to ListStaleShards (the
// index is rebuilt), and the new tables work.
func TestMigrateFromVersion2(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "store.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{schema, migrations[2], "PRAGMA user_version = 2",
		`INSERT INTO jobs (no, id, tenant, idem_key, request_hash, name, template, status, pause_reason, total,
suppressed, shard_count, budget, budget_used, rate_per_sec, created_by, created_at, started_at, finished_at, meta)
VALUES (1, 'job-1', 'tenant', 'k', 'h', 'n', 't', 'running', '', 3, 0, 3, 0, 0, 0, 'me', 1, 1, 0, NULL)`,
		`INSERT INTO shards (job_no, idx, account, status, pause_reason, size, cursor, last_adv, n_pending,
n_submitted, n_confirmed, n_failed, n_abandoned, failures, slow_factor, turn, turn_message, dirty, epoch)
VALUES (1, 0, 'acct', 'running', '', 1, 0, 5, 1, 0, 0, 0, 0, NULL, 1, 2, 'm2', 0, 4),
       (1, 1, 'acct', 'paused', 'breaker', 1, 0, 6, 1, 0, 0, 0, 0, NULL, 1, 0, '', 0, 0),
       (1, 2, 'acct', 'paused', 'manual', 1, 0, 7, 1, 0, 0, 0, 0, NULL, 1, 0, '', 0, 0)`,
	} {
		if _, err := old.ExecContext(ctx, q); err != nil {
			t.Fatalf("write version 2 file: %v", err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s := openTemp(t, path)
	var v int
	if err := s.w.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("schema version after Open = %d, %v; want %d", v, err, schemaVersion)
	}
	refs, err := s.ListStaleShards(ctx, store.ListStaleShardsParams{Before: storetest.Epoch})
	if err != nil || len(refs) != 2 || refs[0] != (store.ShardRef{JobID: "job-1", Index: 0}) || refs[1] != (store.ShardRef{JobID: "job-1", Index: 1}) {
		t.Fatalf("ListStaleShards after migration = %v, %v; want the running and the breaker-paused shard", refs, err)
	}
	sh, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: "job-1", Turn: 2, Epoch: 4, Attempts: 3, AttemptFailures: 1})
	if err != nil || sh.Attempts != 3 || sh.AttemptFailures != 1 || sh.Epoch != 4 {
		t.Fatalf("AdvanceShard on a migrated shard = %+v, %v; want 3 attempts, 1 failed, epoch 4", sh, err)
	}
	if b, err := s.SaveBreaker(ctx, store.Breaker{Tenant: "tenant", Account: "acct", State: store.BreakerOpen}); err != nil || b.Version != 1 {
		t.Fatalf("SaveBreaker after migration = %+v, %v", b, err)
	}
	if err := s.PutSuppressions(ctx, "tenant", []store.Suppression{{Account: "acct", To: "u1"}}); err != nil {
		t.Fatalf("PutSuppressions after migration: %v", err)
	}
	if _, err := s.PutCampaign(ctx, store.Campaign{Tenant: "tenant", ID: "c"}); err != nil {
		t.Fatalf("PutCampaign after migration: %v", err)
	}
}

// TestMigrateFromVersion3 opens a file written by schema version 3 (before
// metadata) with a job whose items were claimed and confirmed: they read
// back with no ref, finish time or message id, keep working (confirm,
// filter by ref), and a new job stores all of them.
func TestMigrateFromVersion3(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "store.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{schema, migrations[2], migrations[3], "PRAGMA user_version = 3",
		`INSERT INTO jobs (no, id, tenant, idem_key, request_hash, name, template, status, pause_reason, total,
suppressed, shard_count, budget, budget_used, rate_per_sec, created_by, created_at, started_at, finished_at, meta)
VALUES (1, 'job-1', 'tenant', 'k', 'h', 'n', 't', 'running', '', 2, 0, 1, 0, 0, 0, 'me', 1, 1, 0, '{"campaign":"c"}')`,
		`INSERT INTO shards (job_no, idx, account, status, pause_reason, size, cursor, last_adv, n_pending,
n_submitted, n_confirmed, n_failed, n_abandoned, failures, slow_factor, turn, turn_message, dirty, epoch)
VALUES (1, 0, 'acct', 'running', '', 2, 2, 5, 0, 1, 1, 0, 0, NULL, 1, 1, 'm1', 0, 0)`,
		`INSERT INTO items (job_no, shard, seq, status, attempts, next_at, sub_at, claim, cat, code, msg, account, to_id, vars)
VALUES (1, 0, 0, 2, 1, 0, 7, 'c1', NULL, NULL, NULL, 'acct', 'u0', NULL),
       (1, 0, 1, 1, 1, 0, 7, 'c1', NULL, NULL, NULL, 'acct', 'u1', '{"name":"Li"}')`,
	} {
		if _, err := old.ExecContext(ctx, q); err != nil {
			t.Fatalf("write version 3 file: %v", err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s := openTemp(t, path)
	var v int
	if err := s.w.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("schema version after Open = %d, %v; want %d", v, err, schemaVersion)
	}
	view, err := s.GetJob(ctx, "job-1")
	if err != nil || view.Job.Metadata != nil || view.Job.Meta["campaign"] != "c" {
		t.Fatalf("migrated job = %+v, %v", view.Job, err)
	}
	at := time.Unix(0, 9).UTC()
	if res, err := s.UpdateItems(ctx, store.UpdateItemsParams{JobID: "job-1", Index: 0, At: at, Updates: []store.ItemUpdate{
		{Seq: 1, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemConfirmed, MsgID: "m-1"},
	}}); err != nil || len(res.Rejected) > 0 {
		t.Fatalf("confirm a migrated item = %+v, %v", res, err)
	}
	items, err := s.ListItems(ctx, store.ListItemsParams{JobID: "job-1"})
	if err != nil || len(items.Items) != 2 {
		t.Fatalf("ListItems after migration = %+v, %v", items, err)
	}
	if it := items.Items[0]; it.Ref != "" || !it.FinishedAt.IsZero() || it.MsgID != "" || it.SubmittedAt.UnixNano() != 7 {
		t.Errorf("an item confirmed before the migration reads %+v", it)
	}
	if it := items.Items[1]; !it.FinishedAt.Equal(at) || it.MsgID != "m-1" || it.Vars["name"] != "Li" {
		t.Errorf("an item confirmed after the migration reads %+v", it)
	}
	if refs, err := s.ListItems(ctx, store.ListItemsParams{JobID: "job-1", Ref: "x"}); err != nil || len(refs.Items) != 0 {
		t.Errorf("ListItems(ref) on migrated items = %+v, %v", refs, err)
	}
}

// TestReleaseAbandonedLeases: a lease held by a process that died is free
// for the next life of the local stack at once, its cursor kept.
func TestReleaseAbandonedLeases(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.AcquireLease(ctx, store.AcquireLeaseParams{Name: "reconciler", Holder: "dead", Now: now, Until: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLease(ctx, store.ReleaseLeaseParams{Name: "reconciler", Holder: "dead", Cursor: "page-7"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, store.AcquireLeaseParams{Name: "reconciler", Holder: "dead-2", Now: now, Until: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, store.AcquireLeaseParams{Name: "reconciler", Holder: "next", Now: now, Until: now.Add(time.Hour)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a held lease was taken: %v", err)
	}
	if n, err := s.ReleaseAbandonedLeases(ctx); err != nil || n != 1 {
		t.Fatalf("ReleaseAbandonedLeases = %d, %v; want 1", n, err)
	}
	l, err := s.AcquireLease(ctx, store.AcquireLeaseParams{Name: "reconciler", Holder: "next", Now: now, Until: now.Add(time.Hour)})
	if err != nil || l.Cursor != "page-7" {
		t.Fatalf("after the release: %+v, %v; want the lease with its cursor", l, err)
	}
}

// Every schema version has its migration: a number left without one would
// leave files at that version silently missing its change.
func TestEveryVersionHasAMigration(t *testing.T) {
	for v := 2; v <= schemaVersion; v++ {
		if strings.TrimSpace(migrations[v]) == "" {
			t.Errorf("schema version %d has no migration", v)
		}
	}
	for v := range migrations {
		if v < 2 || v > schemaVersion {
			t.Errorf("migration %d is outside 2..%d", v, schemaVersion)
		}
	}
}
