package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// tokenEpsilon absorbs float rounding in refills (0.1 s at 10/s must give a
// whole token). The deficit it may cause is carried as negative tokens, so
// it never adds up.
const tokenEpsilon = 1e-9

// TakeTokens takes up to p.Want whole tokens from a bucket that starts full
// and refills continuously at p.RatePerSec up to p.Burst (at least one
// token of capacity, so a bucket with a rate always grants eventually).
//
// Senders poll empty buckets while they wait, so the bucket is first read
// through the read pool: a call that would grant nothing returns without
// taking the write lock (the refill is computed from the stored tokens and
// time, so not storing it changes nothing). Only a grant takes a write
// transaction, which reads the bucket again and decides afresh.
func (s *Store) TakeTokens(ctx context.Context, p store.TakeTokensParams) (store.TakeTokensResult, error) {
	if p.Bucket == "" || p.Want < 0 || p.RatePerSec < 0 || p.Burst < 0 || p.WarmupSec < 0 ||
		math.IsNaN(p.RatePerSec) || math.IsNaN(p.Burst) || math.IsInf(p.RatePerSec, 0) || math.IsInf(p.Burst, 0) ||
		math.IsNaN(p.WarmupSec) || math.IsInf(p.WarmupSec, 0) {
		return store.TakeTokensResult{}, fmt.Errorf("take tokens: %w: bucket, want, rate, burst or warm-up", store.ErrInvalidArgument)
	}
	now := toNanos(p.Now)
	b := store.WarmBucket{Tokens: p.Burst, At: now}
	err := s.readBucket.QueryRowContext(ctx, p.Bucket).Scan(&b.Tokens, &b.At, &b.WarmStart)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return store.TakeTokensResult{}, mapErr(fmt.Errorf("read bucket %q: %w", p.Bucket, err))
	}
	if res, _ := take(b, errors.Is(err, sql.ErrNoRows), now, p); res.Granted == 0 {
		return res, nil
	}
	var res store.TakeTokensResult
	err = s.write(ctx, func(tx *sql.Tx) error {
		b := store.WarmBucket{Tokens: p.Burst, At: now}
		err := s.stmt(ctx, tx, qBucketGet).QueryRowContext(ctx, p.Bucket).Scan(&b.Tokens, &b.At, &b.WarmStart)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("read bucket %q: %w", p.Bucket, err)
		}
		res, b = take(b, errors.Is(err, sql.ErrNoRows), now, p)
		if res.Granted == 0 {
			return nil // taken meanwhile by another caller
		}
		if _, err := s.stmt(ctx, tx, qBucketPut).ExecContext(ctx, p.Bucket, b.Tokens, b.At, b.WarmStart); err != nil {
			return fmt.Errorf("write bucket %q: %w", p.Bucket, err)
		}
		return nil
	})
	if err != nil {
		return store.TakeTokensResult{}, err
	}
	return res, nil
}

// take is takeFrom for a plain bucket (which keeps no warm period) and
// store.TakeWarm for a warming one; fresh tells a bucket never stored.
func take(b store.WarmBucket, fresh bool, now int64, p store.TakeTokensParams) (store.TakeTokensResult, store.WarmBucket) {
	if p.WarmupSec > 0 {
		return store.TakeWarm(b, fresh, now, p)
	}
	var res store.TakeTokensResult
	res, b.Tokens, b.At = takeFrom(b.Tokens, b.At, now, p)
	b.WarmStart = 0
	return res, b
}

// takeFrom refills a bucket holding tokens at time at up to now and takes
// what p asks for; it returns the result and the bucket's new tokens and
// time.
func takeFrom(tokens float64, at, now int64, p store.TakeTokensParams) (store.TakeTokensResult, float64, int64) {
	capacity := max(p.Burst, 1)
	if now > at {
		tokens += p.RatePerSec * float64(now-at) / float64(time.Second)
		at = now
	}
	tokens = min(tokens, capacity)
	grant := int(min(float64(p.Want), math.Floor(tokens+tokenEpsilon)))
	grant = max(grant, 0)
	tokens -= float64(grant)
	res := store.TakeTokensResult{Granted: grant}
	if grant < p.Want {
		res.RetryAfter = retryAfter(1-tokens, p.RatePerSec)
	}
	return res, tokens, at
}

// noRefill is the RetryAfter of a bucket that never refills (rate 0).
const noRefill = time.Duration(math.MaxInt64)

// retryAfter is how long a bucket refilling at rate takes to gain need
// tokens, rounded up to the nanosecond.
func retryAfter(need, rate float64) time.Duration {
	if need <= 0 {
		return 0
	}
	if rate <= 0 {
		return noRefill
	}
	d := math.Ceil(need / rate * float64(time.Second))
	if d >= float64(noRefill) {
		return noRefill
	}
	return time.Duration(d)
}

// accountConfig is the stored form of an account's limits.
type accountConfig struct {
	RatePerSec           float64             `json:"rate_per_sec"`
	Burst                float64             `json:"burst"`
	OnlineReservePerSec  float64             `json:"online_reserve_per_sec"`
	MaxRecipientsPerCall int                 `json:"max_recipients_per_call"`
	MaxContentBytes      int                 `json:"max_content_bytes,omitempty"`
	WarmupSec            int                 `json:"warmup_sec,omitempty"`
	FrequencyCap         *store.FrequencyCap `json:"frequency_cap,omitempty"`
	Provider             string              `json:"provider,omitempty"`
	NoStatusLookup       bool                `json:"no_status_lookup,omitempty"`
	HTTP                 *store.HTTPProvider `json:"http,omitempty"`
	Pacing               *store.Pacing       `json:"pacing,omitempty"`
	Breaker              store.BreakerConfig `json:"breaker"`
	// Sizing is written by SaveAccountSizing only; PutAccount drops it.
	Sizing *sizingConfig `json:"sizing,omitempty"`
}

// sizingConfig is the stored form of store.AccountSizing.
type sizingConfig struct {
	BatchSize   int   `json:"batch_size"`
	Concurrency int   `json:"concurrency"`
	P99Nanos    int64 `json:"p99_ns"`
	At          int64 `json:"at"`
}

// PutAccount creates or replaces a tenant's account.
func (s *Store) PutAccount(ctx context.Context, a store.Account) (store.Account, error) {
	if a.Tenant == "" || a.ID == "" {
		return store.Account{}, fmt.Errorf("put account: %w: empty tenant or id", store.ErrInvalidArgument)
	}
	b, err := json.Marshal(accountConfig{
		RatePerSec: a.RatePerSec, Burst: a.Burst, OnlineReservePerSec: a.OnlineReservePerSec,
		MaxRecipientsPerCall: a.MaxRecipientsPerCall, MaxContentBytes: a.MaxContentBytes, WarmupSec: a.WarmupSec,
		FrequencyCap: capPtr(a.FrequencyCap), Provider: a.Provider, NoStatusLookup: a.NoStatusLookup, HTTP: a.HTTP,
		Pacing: pacingPtr(a.Pacing), Breaker: a.Breaker,
	})
	if err != nil {
		return store.Account{}, fmt.Errorf("put account %q: %w", a.ID, err)
	}
	a.UpdatedAt = fromNanos(toNanos(a.UpdatedAt))
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO accounts (tenant, id, config, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (tenant, id) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at`,
			a.Tenant, a.ID, string(b), toNanos(a.UpdatedAt))
		if err != nil {
			return fmt.Errorf("put account %q: %w", a.ID, err)
		}
		return nil
	})
	if err != nil {
		return store.Account{}, err
	}
	a.Sizing = store.AccountSizing{}
	return a, nil
}

func scanAccount(row interface{ Scan(...any) error }) (store.Account, error) {
	var (
		a       store.Account
		config  string
		updated int64
		c       accountConfig
	)
	if err := row.Scan(&a.Tenant, &a.ID, &config, &updated); err != nil {
		return a, err
	}
	if err := json.Unmarshal([]byte(config), &c); err != nil {
		return a, fmt.Errorf("decode account %q: %w", a.ID, err)
	}
	a.RatePerSec, a.Burst, a.OnlineReservePerSec = c.RatePerSec, c.Burst, c.OnlineReservePerSec
	a.MaxRecipientsPerCall, a.MaxContentBytes, a.Breaker = c.MaxRecipientsPerCall, c.MaxContentBytes, c.Breaker
	a.WarmupSec, a.Provider, a.NoStatusLookup, a.HTTP = c.WarmupSec, c.Provider, c.NoStatusLookup, c.HTTP
	if c.FrequencyCap != nil {
		a.FrequencyCap = *c.FrequencyCap
	}
	if z := c.Sizing; z != nil {
		a.Sizing = store.AccountSizing{BatchSize: z.BatchSize, Concurrency: z.Concurrency,
			P99: time.Duration(z.P99Nanos), At: fromNanos(z.At)}
	}
	if c.Pacing != nil {
		a.Pacing = *c.Pacing
	}
	a.UpdatedAt = fromNanos(updated)
	return a, nil
}

// SaveAccountSizing sets the sizing in the account's config, in one write
// transaction with the read, so a concurrent PutAccount is never undone.
func (s *Store) SaveAccountSizing(ctx context.Context, p store.SaveAccountSizingParams) error {
	if p.Tenant == "" || p.Account == "" || !p.Sizing.Measured() {
		return fmt.Errorf("save account sizing: %w: tenant, account and a sizing with its time", store.ErrInvalidArgument)
	}
	z := p.Sizing
	return s.write(ctx, func(tx *sql.Tx) error {
		var config string
		err := tx.QueryRowContext(ctx, `SELECT config FROM accounts WHERE tenant = ? AND id = ?`, p.Tenant, p.Account).Scan(&config)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("account %s/%s: %w", p.Tenant, p.Account, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("save account sizing %s/%s: %w", p.Tenant, p.Account, err)
		}
		var c accountConfig
		if err := json.Unmarshal([]byte(config), &c); err != nil {
			return fmt.Errorf("decode account %q: %w", p.Account, err)
		}
		c.Sizing = &sizingConfig{BatchSize: z.BatchSize, Concurrency: z.Concurrency, P99Nanos: int64(z.P99), At: toNanos(z.At)}
		b, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("save account sizing %s/%s: %w", p.Tenant, p.Account, err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE accounts SET config = ? WHERE tenant = ? AND id = ?`, string(b), p.Tenant, p.Account); err != nil {
			return fmt.Errorf("save account sizing %s/%s: %w", p.Tenant, p.Account, err)
		}
		return nil
	})
}

// GetAccount reads a tenant's account.
func (s *Store) GetAccount(ctx context.Context, tenant, account string) (store.Account, error) {
	a, err := scanAccount(s.r.QueryRowContext(ctx,
		`SELECT tenant, id, config, updated_at FROM accounts WHERE tenant = ? AND id = ?`, tenant, account))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Account{}, fmt.Errorf("account %s/%s: %w", tenant, account, store.ErrNotFound)
	}
	if err != nil {
		return store.Account{}, mapErr(fmt.Errorf("get account %s/%s: %w", tenant, account, err))
	}
	return a, nil
}

// ListAccounts lists a tenant's accounts ordered by id.
func (s *Store) ListAccounts(ctx context.Context, tenant string) ([]store.Account, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT tenant, id, config, updated_at FROM accounts WHERE tenant = ? ORDER BY id`, tenant)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list accounts: %w", err))
	}
	defer rows.Close()
	var out []store.Account
	for rows.Next() {
		a, err := scanAccount(rows)
		if err != nil {
			return nil, fmt.Errorf("list accounts: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(fmt.Errorf("list accounts: %w", err))
	}
	return out, nil
}

// PutToken binds a token hash to a tenant. Binding it again to the same

// capPtr is nil for no cap, so an account without one stores nothing.
func capPtr(c store.FrequencyCap) *store.FrequencyCap {
	if !c.Capped() {
		return nil
	}
	return &c
}

// pacingPtr is nil for the token bucket, so an account without pacing
// stores nothing.
func pacingPtr(p store.Pacing) *store.Pacing {
	if p == (store.Pacing{}) {
		return nil
	}
	return &p
}
