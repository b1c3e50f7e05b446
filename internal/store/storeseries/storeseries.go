// Package storeseries is a decorator of the store port that records what
// the sender and the reconciler fold into shards as per-minute counters
// (store.SeriesStore): per job, sends, confirmations and new failures by
// category; per account, sends and confirmations. Charts of failures over
// time and of an account's send rate read them back (GET
// /v1/jobs/{id}/series, GET /v1/accounts/{account}/series).
//
// Counts are coalesced in memory and written at most once per Every for
// each series key and minute (and by Flush), so on DynamoDB the series
// costs a few small writes a minute per busy job and account, not a write
// per batch. The series is a chart, not a ledger: counts buffered by a
// process that dies before its next flush are lost, and a delta folded
// twice (a redelivered fold that the store refused is not recorded, but an
// outside change recounted instead of folded is) may be counted once more
// or not at all. The shards' counts stay the truth.
package storeseries

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/store"
)

// Options configure a Store.
type Options struct {
	// Every is the longest counts wait in memory before they are written
	// (default 10 s).
	Every time.Duration
	Clock clock.Clock  // default clock.System{}
	Log   *slog.Logger // default slog.Default()
}

// Store is a store.Store that records the deltas folded into shards in a
// store.SeriesStore.
type Store struct {
	store.Store
	series store.SeriesStore
	opts   Options

	mu      sync.Mutex
	pending map[bufKey]map[string]int64
	since   time.Time // when the oldest pending count was recorded
	tenants map[string]string
}

type bufKey struct {
	key    string
	minute int64 // unix seconds of the minute's start
}

var _ store.Store = (*Store)(nil)

// Wrap decorates inner, recording into series.
func Wrap(inner store.Store, series store.SeriesStore, opts Options) *Store {
	if opts.Every <= 0 {
		opts.Every = 10 * time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.System{}
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Store{Store: inner, series: series, opts: opts, pending: map[bufKey]map[string]int64{}, tenants: map[string]string{}}
}

// AdvanceShard folds a sender's progress and records it.
func (s *Store) AdvanceShard(ctx context.Context, p store.AdvanceShardParams) (store.Shard, error) {
	sh, err := s.Store.AdvanceShard(ctx, p)
	if err == nil {
		s.record(ctx, sh, p.At, p.Attempts, p.Delta, p.FailuresDelta)
	}
	return sh, err
}

// AddShardCounts folds a change made outside a turn and records it.
func (s *Store) AddShardCounts(ctx context.Context, p store.AddShardCountsParams) (store.Shard, error) {
	sh, err := s.Store.AddShardCounts(ctx, p)
	if err == nil {
		s.record(ctx, sh, s.opts.Clock.Now(), 0, p.Delta, p.FailuresDelta)
	}
	return sh, err
}

func (s *Store) record(ctx context.Context, sh store.Shard, at time.Time, sent int64, d store.Counts, failures map[string]int64) {
	job := map[string]int64{}
	if sent > 0 {
		job[store.SeriesSent] = sent
	}
	if d.Confirmed > 0 {
		job[store.SeriesConfirmed] = d.Confirmed
	}
	acct := map[string]int64{}
	for k, n := range job {
		acct[k] = n
	}
	for k, n := range failures {
		if n > 0 && k != store.TallyConfirmedAfterRetry {
			job[k] = n
		}
	}
	if len(job) == 0 {
		return
	}
	tenant := s.tenantOf(ctx, sh.JobID)
	minute := at.Unix() - at.Unix()%60
	s.mu.Lock()
	if len(s.pending) == 0 {
		s.since = s.opts.Clock.Now()
	}
	s.add(bufKey{store.JobSeriesKey(sh.JobID), minute}, job)
	if tenant != "" && len(acct) > 0 {
		s.add(bufKey{store.AccountSeriesKey(tenant, sh.Account), minute}, acct)
	}
	due := s.opts.Clock.Now().Sub(s.since) >= s.opts.Every
	s.mu.Unlock()
	if due {
		if err := s.Flush(context.WithoutCancel(ctx)); err != nil {
			s.opts.Log.Warn("series flush failed", slog.Any("err", err))
		}
	}
}

func (s *Store) add(k bufKey, counts map[string]int64) {
	b := s.pending[k]
	if b == nil {
		b = map[string]int64{}
		s.pending[k] = b
	}
	for name, n := range counts {
		b[name] += n
	}
}

// tenantOf is the tenant of a job (cached; "" when it cannot be read).
func (s *Store) tenantOf(ctx context.Context, jobID string) string {
	s.mu.Lock()
	t, ok := s.tenants[jobID]
	s.mu.Unlock()
	if ok {
		return t
	}
	j, err := s.Store.GetJobRecord(ctx, jobID)
	if err != nil {
		return ""
	}
	s.mu.Lock()
	if len(s.tenants) > 10000 {
		clear(s.tenants)
	}
	s.tenants[jobID] = j.Tenant
	s.mu.Unlock()
	return j.Tenant
}

// manyWriter is a series store that writes several series in one call
// (the SQLite store: one write transaction instead of one per series).
type manyWriter interface {
	AddSeriesMany(ctx context.Context, ps []store.AddSeriesParams) error
}

// Flush writes every pending count. Counts whose write failed stay
// pending for the next flush.
func (s *Store) Flush(ctx context.Context) error {
	s.mu.Lock()
	batch := s.pending
	s.pending = map[bufKey]map[string]int64{}
	s.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	keep := func(k bufKey, counts map[string]int64) {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.since = s.opts.Clock.Now()
		}
		s.add(k, counts)
		s.mu.Unlock()
	}
	if mw, ok := s.series.(manyWriter); ok {
		ps := make([]store.AddSeriesParams, 0, len(batch))
		for k, counts := range batch {
			ps = append(ps, store.AddSeriesParams{Key: k.key, Minute: time.Unix(k.minute, 0), Counts: counts})
		}
		err := mw.AddSeriesMany(ctx, ps)
		if err != nil {
			for k, counts := range batch {
				keep(k, counts)
			}
		}
		return err
	}
	var errs []error
	for k, counts := range batch {
		err := s.series.AddSeries(ctx, store.AddSeriesParams{Key: k.key, Minute: time.Unix(k.minute, 0), Counts: counts})
		if err != nil {
			errs = append(errs, err)
			keep(k, counts)
		}
	}
	return errors.Join(errs...)
}

// FlushAfter wraps a Lambda handler so that pending counts are written at
// the end of every invocation. A failed flush is logged, never returned.
func FlushAfter[In, Out any](s *Store, log *slog.Logger, h func(context.Context, In) (Out, error)) func(context.Context, In) (Out, error) {
	return func(ctx context.Context, in In) (Out, error) {
		out, err := h(ctx, in)
		if s != nil {
			if ferr := s.Flush(context.WithoutCancel(ctx)); ferr != nil && log != nil {
				log.Warn("series flush failed", slog.Any("err", ferr))
			}
		}
		return out, err
	}
}

// FlushAfterErr is FlushAfter for handlers that return only an error.
func FlushAfterErr[In any](s *Store, log *slog.Logger, h func(context.Context, In) error) func(context.Context, In) error {
	wrapped := FlushAfter(s, log, func(ctx context.Context, in In) (struct{}, error) { return struct{}{}, h(ctx, in) })
	return func(ctx context.Context, in In) error {
		_, err := wrapped(ctx, in)
		return err
	}
}
