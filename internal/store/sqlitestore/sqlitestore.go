// Package sqlitestore is the embedded adapter of the store port: one SQLite
// file (pure Go driver, WAL mode) holding jobs, shards, items, token
// buckets, accounts, API tokens, circuit breakers, suppression lists and
// campaigns. It is the default store of the local
// runtime and must behave exactly like the DynamoDB adapter; the shared
// conformance suite in storetest proves it.
//
// Every write runs in one BEGIN IMMEDIATE transaction on a single write
// connection, so writers of this process queue in Go instead of spinning on
// SQLITE_BUSY, and writers of other processes wait on the busy timeout.
// Reads use a separate pool and never block the writer (WAL). A process
// killed at any point leaves the file consistent: SQLite's journal rolls an
// interrupted transaction back on the next open. With synchronous=NORMAL a
// committed transaction survives a process kill (it is in the WAL file);
// a power loss may drop the last commits but never corrupts the file.
package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.Store = (*Store)(nil)

// schemaVersion is the version of the schema (schema plus migrations),
// kept in PRAGMA user_version. Open refuses a file written by a newer
// version.
const schemaVersion = 21

// busyTimeout is how long a write waits for another process's write lock.
const busyTimeout = 30 * time.Second

// readConns is the size of the read pool.
const readConns = 4

// Item status codes as stored in the items table (small integers keep item
// rows and their indexes small).
const (
	codePending   = 0
	codeSubmitted = 1
	codeConfirmed = 2
	codeFailed    = 3
	codeAbandoned = 4
)

var statusCodes = map[store.ItemStatus]int{
	store.ItemPending:   codePending,
	store.ItemSubmitted: codeSubmitted,
	store.ItemConfirmed: codeConfirmed,
	store.ItemFailed:    codeFailed,
	store.ItemAbandoned: codeAbandoned,
}

var statusNames = [...]store.ItemStatus{
	codePending:   store.ItemPending,
	codeSubmitted: store.ItemSubmitted,
	codeConfirmed: store.ItemConfirmed,
	codeFailed:    store.ItemFailed,
	codeAbandoned: store.ItemAbandoned,
}

// schema is the version 1 schema; migrations bring it to schemaVersion. Times are INTEGER Unix nanoseconds (0 =
// zero time). Jobs get a small integer number (no) that items and shards
// use instead of the job id, so the hot tables stay narrow.
//
// Items are clustered by (job, shard, seq): a claim, a recount and an
// update of one shard touch neighbouring rows. Since version 20 a row
// holds a run of items of equal state, keyed by its first seq (runs.go). The partial indexes cover
// only the rows a hot query needs: pending items for claims (in seq order)
// and for the next due time, submitted items for the reconciler, failed and
// abandoned items and items with an error for operators' listings. Claims
// and confirmations never touch the last two.
const schema = `
CREATE TABLE jobs (
	no            INTEGER PRIMARY KEY,
	id            TEXT NOT NULL UNIQUE,
	tenant        TEXT NOT NULL,
	idem_key      TEXT NOT NULL,
	request_hash  TEXT NOT NULL,
	name          TEXT NOT NULL,
	template      TEXT NOT NULL,
	status        TEXT NOT NULL,
	pause_reason  TEXT NOT NULL,
	total         INTEGER NOT NULL,
	suppressed    INTEGER NOT NULL,
	shard_count   INTEGER NOT NULL,
	budget        INTEGER NOT NULL,
	budget_used   INTEGER NOT NULL,
	rate_per_sec  REAL NOT NULL,
	created_by    TEXT NOT NULL,
	created_at    INTEGER NOT NULL,
	started_at    INTEGER NOT NULL,
	finished_at   INTEGER NOT NULL,
	meta          TEXT
);
CREATE UNIQUE INDEX jobs_idem ON jobs (tenant, idem_key) WHERE idem_key <> '';
CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at, no);

CREATE TABLE shards (
	job_no        INTEGER NOT NULL REFERENCES jobs (no),
	idx           INTEGER NOT NULL,
	account       TEXT NOT NULL,
	status        TEXT NOT NULL,
	pause_reason  TEXT NOT NULL,
	size          INTEGER NOT NULL,
	cursor        INTEGER NOT NULL,
	last_adv      INTEGER NOT NULL,
	n_pending     INTEGER NOT NULL,
	n_submitted   INTEGER NOT NULL,
	n_confirmed   INTEGER NOT NULL,
	n_failed      INTEGER NOT NULL,
	n_abandoned   INTEGER NOT NULL,
	failures      TEXT,
	slow_factor   REAL NOT NULL,
	turn          INTEGER NOT NULL,
	turn_message  TEXT NOT NULL,
	dirty         INTEGER NOT NULL,
	PRIMARY KEY (job_no, idx)
) WITHOUT ROWID;
CREATE INDEX shards_stale ON shards (last_adv) WHERE status = 'running';

CREATE TABLE items (
	job_no    INTEGER NOT NULL,
	shard     INTEGER NOT NULL,
	seq       INTEGER NOT NULL,
	status    INTEGER NOT NULL,
	attempts  INTEGER NOT NULL,
	next_at   INTEGER NOT NULL,
	sub_at    INTEGER NOT NULL,
	claim     TEXT NOT NULL,
	cat       TEXT,
	code      TEXT,
	msg       TEXT,
	account   TEXT NOT NULL,
	to_id     TEXT NOT NULL,
	vars      TEXT,
	PRIMARY KEY (job_no, shard, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX items_seq ON items (job_no, seq);
CREATE INDEX items_claim ON items (job_no, shard, seq, next_at) WHERE status = 0;
CREATE INDEX items_due ON items (job_no, shard, next_at) WHERE status = 0;
CREATE INDEX items_submitted ON items (sub_at, job_no, seq) WHERE status = 1;
CREATE INDEX items_failed ON items (job_no, status, seq) WHERE status >= 3;
CREATE INDEX items_category ON items (job_no, cat, seq) WHERE cat IS NOT NULL;

CREATE TABLE buckets (
	name    TEXT PRIMARY KEY,
	tokens  REAL NOT NULL,
	at      INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE accounts (
	tenant      TEXT NOT NULL,
	id          TEXT NOT NULL,
	config      TEXT NOT NULL,
	updated_at  INTEGER NOT NULL,
	PRIMARY KEY (tenant, id)
) WITHOUT ROWID;

CREATE TABLE api_tokens (
	hash    TEXT PRIMARY KEY,
	tenant  TEXT NOT NULL
) WITHOUT ROWID;
`

// migrations[v] takes a file from schema version v-1 to v. A new file gets
// schema and then every migration, so the upgrade path of existing files is
// the one every fresh store takes.
var migrations = map[int]string{
	// 11: tenants' quotas and their daily recipients counters (quota.go).
	11: quotaSchema,
	// 12: canary (issue 13): a job's canary size, whether an operator
	// approved it, and the canary's results at approval.
	12: `
ALTER TABLE jobs ADD COLUMN canary INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN canary_ok INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN canary_confirmed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN canary_failed INTEGER NOT NULL DEFAULT 0;
`,
	// 13: the status filter of a job's items listing (ListItems) reads a
	// page, not the job: pending, submitted and confirmed items by (job,
	// status, seq), as items_failed holds failed and abandoned ones.
	13: `CREATE INDEX items_status ON items (job_no, status, seq) WHERE status < 3;`,
	// 14: account warm-up (issue 13): the start of a bucket's current warm
	// period (0: none).
	14: `ALTER TABLE buckets ADD COLUMN warm INTEGER NOT NULL DEFAULT 0;`,
	// 15: per-recipient frequency caps (issue 13): the items charged to a
	// recipient of a tenant's account, by charge time (frequency.go).
	15: frequencySchema,
	// 16: issue 15: webhook kinds (webhooks.go) and the breaker history,
	// each account's last store.MaxBreakerHistory transitions in a ring of
	// slots (breakers.go).
	16: issue15Schema,
	// 17: issue 18: provider calls accepted under a message id whose
	// result comes later (msgcalls.go).
	17: msgCallsSchema,
	// 18: issue 10: the next-due index holds only pending items with a
	// next-attempt time (retries and items planned for later). Fresh items
	// (next_at 0, due at once) are in items_claim in seq order; leaving
	// them out of items_due saves an index write per item at planning and
	// another at its claim. ClaimItems tells whether one is left by
	// itself (claimNextDue).
	18: `
DROP INDEX items_due;
CREATE INDEX items_due ON items (job_no, shard, next_at) WHERE status = 0 AND next_at > 0;
`,
	// 19: issue 14: a campaign's time zone ('': the stack's default).
	19: `ALTER TABLE campaigns ADD COLUMN timezone TEXT NOT NULL DEFAULT '';`,
	// 20: issue 10: a row of items holds a run of items sharing their
	// state (runs.go): n items, the last span seqs after the first, their
	// own fields in body. A row of before is a run of one (n 1, span 0,
	// no body).
	20: `
ALTER TABLE items ADD COLUMN n INTEGER NOT NULL DEFAULT 1;
ALTER TABLE items ADD COLUMN span INTEGER NOT NULL DEFAULT 0;
ALTER TABLE items ADD COLUMN body BLOB;
`,
	// 21: the outcomes watermark of a shard and its replay marks
	// (store.Shard.OutcomesPublishedTo, OutcomesReplay, OutcomesOutside,
	// OutcomesOutsideSeenAt, TurnOpen).
	21: `
ALTER TABLE shards ADD COLUMN outcomes_to INTEGER NOT NULL DEFAULT 0;
ALTER TABLE shards ADD COLUMN outcomes_replay INTEGER NOT NULL DEFAULT 0;
ALTER TABLE shards ADD COLUMN outcomes_outside INTEGER NOT NULL DEFAULT 0;
ALTER TABLE shards ADD COLUMN outcomes_outside_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE shards ADD COLUMN turn_open INTEGER NOT NULL DEFAULT 0;
`,
	// 10: the audit log of state-changing API calls (audit.go).
	10: auditSchema,
	// 9: tenants (issue 12). API tokens get an id, a name, a role and an
	// expiry; tokens provisioned before keep working as admin tokens. Each
	// provider account has at most one owning tenant: an account that only
	// one tenant configured is granted to it, one configured by several
	// tenants to none (the platform operator decides).
	9: `
ALTER TABLE api_tokens ADD COLUMN id TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN role TEXT NOT NULL DEFAULT 'admin';
ALTER TABLE api_tokens ADD COLUMN created_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_tokens ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
UPDATE api_tokens SET id = 'tok_' || substr(hash, 1, 16), name = 'provisioned' WHERE id = '';
CREATE UNIQUE INDEX api_tokens_id ON api_tokens (tenant, id);
CREATE TABLE account_owners (
	account     TEXT NOT NULL PRIMARY KEY,
	tenant      TEXT NOT NULL,
	granted_at  INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO account_owners (account, tenant, granted_at)
	SELECT id, MIN(tenant), 0 FROM accounts GROUP BY id HAVING COUNT(DISTINCT tenant) = 1;
`,
	// 6: leases of singleton tasks (the reconciler), with the cursor where
	// the last holder stopped.
	6: `
CREATE TABLE leases (
	name    TEXT NOT NULL PRIMARY KEY,
	holder  TEXT NOT NULL,
	until   INTEGER NOT NULL,
	cursor  TEXT NOT NULL
) WITHOUT ROWID;
`,
	// 2: count epochs (store package doc); existing shards start at 0.
	2: `ALTER TABLE shards ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;`,
	// 3: operations. Cumulative attempt counters on shards (existing
	// shards start at 0); the stale-shard index also covers shards paused
	// by their breaker; circuit breakers (the partial index holds the
	// non-closed ones, which the scheduled check lists across tenants);
	// suppression lists, keyed so a look-up of a batch of recipients is
	// one join on the primary key; campaigns.
	3: `
ALTER TABLE shards ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE shards ADD COLUMN attempt_failures INTEGER NOT NULL DEFAULT 0;
DROP INDEX shards_stale;
CREATE INDEX shards_stale ON shards (last_adv) WHERE ` + staleShardCond + `;

CREATE TABLE breakers (
	tenant           TEXT NOT NULL,
	account          TEXT NOT NULL,
	state            TEXT NOT NULL,
	reason           TEXT NOT NULL,
	opened_at        INTEGER NOT NULL,
	until            INTEGER NOT NULL,
	opens            INTEGER NOT NULL,
	probe_shard      TEXT NOT NULL,
	window_at        INTEGER NOT NULL,
	window_attempts  INTEGER NOT NULL,
	window_failures  INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	version          INTEGER NOT NULL,
	PRIMARY KEY (tenant, account)
) WITHOUT ROWID;
CREATE INDEX breakers_open ON breakers (tenant, account) WHERE state <> 'closed';

CREATE TABLE suppressions (
	tenant      TEXT NOT NULL,
	account     TEXT NOT NULL,
	to_id       TEXT NOT NULL,
	reason      TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	PRIMARY KEY (tenant, account, to_id)
) WITHOUT ROWID;

CREATE TABLE campaigns (
	tenant         TEXT NOT NULL,
	id             TEXT NOT NULL,
	name           TEXT NOT NULL,
	schedule       TEXT NOT NULL,
	mode           TEXT NOT NULL,
	request        BLOB,
	source         TEXT NOT NULL,
	max_delay_sec  INTEGER NOT NULL,
	enabled        INTEGER NOT NULL,
	last_fired_at  INTEGER NOT NULL,
	created_by     TEXT NOT NULL,
	created_at     INTEGER NOT NULL,
	updated_at     INTEGER NOT NULL,
	PRIMARY KEY (tenant, id)
) WITHOUT ROWID;
`,
	// 4: metadata (issue 15). The submitter's job metadata; per item the
	// submitter's reference (with the payload columns, indexed for the
	// ref filter, only where set), when it reached its terminal status
	// and the provider's message id. Existing rows: no metadata, no ref,
	// no finish time, no message id.
	4: `
ALTER TABLE jobs ADD COLUMN metadata TEXT;
ALTER TABLE items ADD COLUMN ref TEXT;
ALTER TABLE items ADD COLUMN fin_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE items ADD COLUMN msgid TEXT;
CREATE INDEX items_ref ON items (job_no, ref, seq) WHERE ref IS NOT NULL;
`,
	// 5: webhooks and their deliveries (webhooks.go).
	5: webhookSchema,
	// 7: staged submission (staging.go): the parts of staging jobs, the
	// planning checkpoints of starting jobs, and the index the expiry of
	// staging jobs reads.
	7: stagingSchema,
	// 8: per-minute series (series.go).
	8: seriesSchema,
}

// staleShardCond selects the shards ListStaleShards watches: running, or
// paused by their breaker (the reconciler resumes or probes them). It is
// the shards_stale index's WHERE clause; ListStaleShards repeats it term
// for term (qualified), so that it can use the partial index.
const staleShardCond = `(status = 'running' OR (status = 'paused' AND pause_reason = 'breaker'))`

// Store is the SQLite store. It is safe for concurrent use by many
// goroutines, and several processes may open the same file.
type Store struct {
	w *sql.DB // one connection; every transaction BEGIN IMMEDIATE
	r *sql.DB // read pool, query_only

	readBucket *sql.Stmt // qBucketGet prepared on r

	stmts map[string]*sql.Stmt // prepared on w at Open

	mu     sync.RWMutex
	jobNos map[string]int64 // job id → no; never changes once created
}

// Open opens (creating it and its directory if needed) the store file at
// path and brings its schema up to date.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("open sqlite store: %w: empty path", store.ErrInvalidArgument)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	common := url.Values{}
	common.Set("_busy_timeout", strconv.FormatInt(busyTimeout.Milliseconds(), 10))
	common.Set("_journal_mode", "WAL")
	common.Set("_synchronous", "NORMAL")
	common.Set("_foreign_keys", "1")

	wq := url.Values{}
	for k, v := range common {
		wq[k] = v
	}
	wq.Set("_txlock", "immediate")
	w, err := sql.Open("sqlite", path+"?"+wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	s := &Store{w: w, jobNos: map[string]int64{}}
	if err := s.migrate(ctx); err != nil {
		_ = w.Close()
		return nil, err
	}

	rq := url.Values{}
	for k, v := range common {
		rq[k] = v
	}
	rq.Set("_query_only", "1")
	r, err := sql.Open("sqlite", path+"?"+rq.Encode())
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	r.SetMaxOpenConns(readConns)
	r.SetMaxIdleConns(readConns)
	s.r = r

	if err := s.prepare(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	if s.readBucket, err = r.PrepareContext(ctx, qBucketGet); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("prepare %q on the read pool: %w", qBucketGet, err)
	}
	return s, nil
}

// Close closes the store's connections.
func (s *Store) Close() error {
	var errs []error
	for _, st := range s.stmts {
		errs = append(errs, st.Close())
	}
	if s.readBucket != nil {
		errs = append(errs, s.readBucket.Close())
	}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	errs = append(errs, s.w.Close())
	return errors.Join(errs...)
}

func (s *Store) migrate(ctx context.Context) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		var v int
		if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		switch {
		case v == schemaVersion:
			return nil
		case v > schemaVersion:
			return fmt.Errorf("store file has schema version %d, this build knows %d", v, schemaVersion)
		}
		if v == 0 {
			if _, err := tx.ExecContext(ctx, schema); err != nil {
				return fmt.Errorf("create schema: %w", err)
			}
			v = 1
		}
		for v < schemaVersion {
			v++
			if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
				return fmt.Errorf("migrate schema to version %d: %w", v, err)
			}
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
			return fmt.Errorf("set schema version: %w", err)
		}
		return nil
	})
}

// Hot statements, prepared once on the write connection.
const (
	// qNextDue is the earliest next-attempt time of the shard's pending
	// items that have one; qMoreDue whether a pending item after seq ?3
	// is due at ?4 (fresh items, next_at 0, are always due).
	qNextDue = `SELECT MIN(next_at) FROM items INDEXED BY items_due
WHERE job_no = ?1 AND shard = ?2 AND status = 0 AND next_at > 0`
	qMoreDue = `SELECT EXISTS (SELECT 1 FROM items INDEXED BY items_claim
WHERE job_no = ?1 AND shard = ?2 AND status = 0 AND seq > ?3 AND next_at <= ?4)`
	qShardGet = `SELECT ` + shardCols + ` FROM shards s JOIN jobs j ON j.no = s.job_no WHERE s.job_no = ?1 AND s.idx = ?2`
	qShardPut = `UPDATE shards SET status = ?3, pause_reason = ?4, cursor = ?5, last_adv = ?6,
n_pending = ?7, n_submitted = ?8, n_confirmed = ?9, n_failed = ?10, n_abandoned = ?11,
failures = ?12, slow_factor = ?13, turn = ?14, turn_message = ?15, dirty = ?16, epoch = ?17,
attempts = ?18, attempt_failures = ?19, outcomes_to = ?20, outcomes_replay = ?21, outcomes_outside = ?22, turn_open = ?23, outcomes_outside_at = ?24
WHERE job_no = ?1 AND idx = ?2`
	qBucketGet = `SELECT tokens, at, warm FROM buckets WHERE name = ?1`
	qBucketPut = `INSERT INTO buckets (name, tokens, at, warm) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (name) DO UPDATE SET tokens = excluded.tokens, at = excluded.at, warm = excluded.warm`
)

func (s *Store) prepare(ctx context.Context) error {
	s.stmts = map[string]*sql.Stmt{}
	for _, q := range []string{qClaimRuns, qRunAt, qRunsFrom, qRunPut, qRunDelete, qNextDue, qMoreDue, qShardGet, qShardPut, qBucketGet, qBucketPut} {
		st, err := s.w.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", firstLine(q), err)
		}
		s.stmts[q] = st
	}
	return nil
}

func firstLine(q string) string {
	if i := strings.IndexByte(q, '\n'); i >= 0 {
		return q[:i]
	}
	return q
}

// stmt returns the prepared statement q bound to tx.
func (s *Store) stmt(ctx context.Context, tx *sql.Tx, q string) *sql.Stmt {
	return tx.StmtContext(ctx, s.stmts[q])
}

// write runs fn in one write transaction (BEGIN IMMEDIATE) and commits it.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return mapErr(fmt.Errorf("begin write: %w", err))
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return mapErr(err)
	}
	if err := tx.Commit(); err != nil {
		return mapErr(fmt.Errorf("commit: %w", err))
	}
	return nil
}

// read runs fn in one read transaction, a consistent snapshot.
func (s *Store) read(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return mapErr(fmt.Errorf("begin read: %w", err))
	}
	defer func() { _ = tx.Rollback() }()
	return mapErr(fn(tx))
}

// mapErr translates SQLite errors into the port's sentinels, keeping the
// original in the chain.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) ||
		errors.Is(err, store.ErrInvalidArgument) || errors.Is(err, store.ErrInvalidTransition) {
		return err
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", store.ErrNotFound, err)
	}
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%w: %w", store.ErrConflict, err)
		default:
			return fmt.Errorf("%w: %w", store.ErrInvalidArgument, err)
		}
	}
	return err
}

// jobNo returns the internal number of a job (ErrNotFound if unknown).
// Numbers never change, so they are cached.
func (s *Store) jobNo(ctx context.Context, q querier, id string) (int64, error) {
	if id == "" {
		return 0, fmt.Errorf("%w: empty job id", store.ErrInvalidArgument)
	}
	s.mu.RLock()
	no, ok := s.jobNos[id]
	s.mu.RUnlock()
	if ok {
		return no, nil
	}
	err := q.QueryRowContext(ctx, `SELECT no FROM jobs WHERE id = ?`, id).Scan(&no)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("job %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("look up job %q: %w", id, err)
	}
	s.mu.Lock()
	s.jobNos[id] = no
	s.mu.Unlock()
	return no, nil
}

// querier is what *sql.Tx and *sql.DB share.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// toNanos stores a time: the zero time is 0.
func toNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromNanos reads a stored time (UTC).
func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// encodeCursor and decodeCursor make opaque cursors of integer keys.
func encodeCursor(kind string, parts ...int64) string {
	b := []byte(kind)
	for _, p := range parts {
		b = append(b, ':')
		b = strconv.AppendInt(b, p, 10)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(c, kind string, n int) ([]int64, error) {
	bad := fmt.Errorf("%w: malformed cursor", store.ErrInvalidArgument)
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, bad
	}
	fields := strings.Split(string(raw), ":")
	if len(fields) != n+1 || fields[0] != kind {
		return nil, bad
	}
	out := make([]int64, n)
	for i := range out {
		v, err := strconv.ParseInt(fields[i+1], 10, 64)
		if err != nil {
			return nil, bad
		}
		out[i] = v
	}
	return out, nil
}

// carriedCategory is the error category an item counts under in
// Shard.Failures: failed and abandoned items count under their error's
// category, submitted items only while under review (uncertain).
func carriedCategory(status store.ItemStatus, category string) string {
	switch status {
	case store.ItemFailed, store.ItemAbandoned:
		return category
	case store.ItemSubmitted:
		if category == store.CategoryUncertain {
			return category
		}
	}
	return ""
}

// retriedTally is the Shard.Failures key an item counts under besides its
// category: store.TallyConfirmedAfterRetry when it was confirmed after more
// than one attempt.
func retriedTally(status store.ItemStatus, attempts int) string {
	if store.ConfirmedAfterRetry(status, attempts) {
		return store.TallyConfirmedAfterRetry
	}
	return ""
}

// moveFailure records an item's category change in a failures delta.
func moveFailure(d map[string]int64, oldCat, newCat string) {
	if oldCat == newCat {
		return
	}
	if oldCat != "" {
		d[oldCat]--
		if d[oldCat] == 0 {
			delete(d, oldCat)
		}
	}
	if newCat != "" {
		d[newCat]++
		if d[newCat] == 0 {
			delete(d, newCat)
		}
	}
}
