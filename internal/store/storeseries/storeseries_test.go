package storeseries_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/store/storeseries"
)

// TestRecordsFolds: a sender's fold and an outside fold end up in the
// job's and the account's per-minute series, coalesced until Every has
// passed or Flush is called; a refused fold records nothing.
func TestRecordsFolds(t *testing.T) {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Date(2031, 3, 4, 5, 6, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	s := storeseries.Wrap(st, st, storeseries.Options{Every: 10 * time.Second, Clock: clk})

	if _, err := st.CreateJob(ctx, store.CreateJobParams{
		Job:    store.Job{ID: "j1", Tenant: "t1", IdempotencyKey: "k", RequestHash: "h", Status: store.JobCreating, Total: 4, ShardCount: 1, CreatedAt: t0},
		Shards: []store.Shard{{JobID: "j1", Index: 0, Account: "acct-a", Status: store.ShardPending, Size: 4, Counts: store.Counts{Pending: 4}, SlowFactor: 1}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.BeginTurn(ctx, store.BeginTurnParams{JobID: "j1", Index: 0, Turn: 1, MessageID: "m1", At: t0}); err != nil {
		t.Fatal(err)
	}
	advance := func(turn int64, d store.Counts, f map[string]int64, attempts int64) error {
		_, err := s.AdvanceShard(ctx, store.AdvanceShardParams{JobID: "j1", Index: 0, Turn: turn, Delta: d, FailuresDelta: f,
			At: clk.Now(), Attempts: attempts})
		return err
	}
	if err := advance(1, store.Counts{Pending: -3, Confirmed: 2, Failed: 1}, map[string]int64{store.CategoryPermanent: 1, store.TallyConfirmedAfterRetry: 1}, 3); err != nil {
		t.Fatal(err)
	}
	if err := advance(7, store.Counts{Pending: -1, Confirmed: 1}, nil, 1); err == nil {
		t.Fatal("a stale turn's fold was accepted")
	}
	list := func(key string) []store.SeriesPoint {
		t.Helper()
		pts, err := st.ListSeries(ctx, store.ListSeriesParams{Key: key, From: t0.Add(-time.Hour), To: t0.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return pts
	}
	if pts := list(store.JobSeriesKey("j1")); len(pts) != 0 {
		t.Fatalf("written before Every passed: %+v", pts)
	}
	clk.Advance(11 * time.Second)
	if _, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: "j1", Index: 0, Delta: store.Counts{Pending: -1, Failed: 1},
		FailuresDelta: map[string]int64{store.CategoryExhausted: 1}}); err != nil {
		t.Fatal(err)
	}
	job := list(store.JobSeriesKey("j1"))
	want := map[string]int64{store.SeriesSent: 3, store.SeriesConfirmed: 2, store.CategoryPermanent: 1, store.CategoryExhausted: 1}
	if len(job) != 1 || !equal(job[0].Counts, want) {
		t.Fatalf("job series %+v, want one minute %v", job, want)
	}
	acct := list(store.AccountSeriesKey("t1", "acct-a"))
	if len(acct) != 1 || !equal(acct[0].Counts, map[string]int64{store.SeriesSent: 3, store.SeriesConfirmed: 2}) {
		t.Fatalf("account series %+v", acct)
	}

	clk.Advance(time.Minute)
	if err := advance(1, store.Counts{}, nil, 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if acct := list(store.AccountSeriesKey("t1", "acct-a")); len(acct) != 2 || acct[1].Counts[store.SeriesSent] != 5 {
		t.Fatalf("after Flush, account series %+v, want a second minute with 5 sent", acct)
	}
}

func equal(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// countingSeries counts how a flush reaches the series store.
type countingSeries struct {
	*sqlitestore.Store
	single, many, manyKeys int
}

func (c *countingSeries) AddSeries(ctx context.Context, p store.AddSeriesParams) error {
	c.single++
	return c.Store.AddSeries(ctx, p)
}

func (c *countingSeries) AddSeriesMany(ctx context.Context, ps []store.AddSeriesParams) error {
	c.many++
	c.manyKeys += len(ps)
	return c.Store.AddSeriesMany(ctx, ps)
}

// TestFlushWritesOnceOnSQLite: a flush of many series (a job over several
// accounts) is one write transaction on SQLite, not one per series: with
// 200 accounts flushed every second, one transaction per series took the
// single writer from the senders (BenchmarkManyAccounts fell from 0.95 to
// 0.6).
func TestFlushWritesOnceOnSQLite(t *testing.T) {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Date(2031, 3, 4, 5, 6, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	cs := &countingSeries{Store: st}
	s := storeseries.Wrap(st, cs, storeseries.Options{Every: time.Hour, Clock: clk})
	var shards []store.Shard
	for i, a := range []string{"acct-a", "acct-b", "acct-c"} {
		shards = append(shards, store.Shard{JobID: "j1", Index: i, Account: a, Status: store.ShardPending, Size: 2, Counts: store.Counts{Pending: 2}, SlowFactor: 1})
	}
	if _, err := st.CreateJob(ctx, store.CreateJobParams{
		Job:    store.Job{ID: "j1", Tenant: "t1", IdempotencyKey: "k", RequestHash: "h", Status: store.JobCreating, Total: 6, ShardCount: 3, CreatedAt: t0},
		Shards: shards,
	}); err != nil {
		t.Fatal(err)
	}
	for i := range shards {
		if _, err := s.AddShardCounts(ctx, store.AddShardCountsParams{JobID: "j1", Index: i, Delta: store.Counts{Pending: -1, Confirmed: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if cs.single != 0 || cs.many != 1 || cs.manyKeys != 4 {
		t.Fatalf("flush: %d single writes, %d batched writes of %d series; want one batched write of 4 (the job and 3 accounts)", cs.single, cs.many, cs.manyKeys)
	}
	for _, key := range []string{store.JobSeriesKey("j1"), store.AccountSeriesKey("t1", "acct-b")} {
		pts, err := st.ListSeries(ctx, store.ListSeriesParams{Key: key, From: t0.Add(-time.Hour), To: t0.Add(time.Hour)})
		if err != nil || len(pts) != 1 {
			t.Fatalf("series %s after the flush: %+v, %v", key, pts, err)
		}
	}
}
