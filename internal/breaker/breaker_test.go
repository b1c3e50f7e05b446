package breaker_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
)

func TestCooldownDoublesAndCaps(t *testing.T) {
	cfg := store.BreakerConfig{CooldownSec: 60}
	for _, tt := range []struct {
		opens int
		want  time.Duration
	}{{1, time.Minute}, {2, 2 * time.Minute}, {3, 4 * time.Minute}, {7, time.Hour}, {50, time.Hour}} {
		if got := breaker.Cooldown(cfg, tt.opens); got != tt.want {
			t.Errorf("Cooldown(opens %d) = %v, want %v", tt.opens, got, tt.want)
		}
	}
	if got := breaker.Cooldown(store.BreakerConfig{}, 1); got != breaker.DefaultCooldown {
		t.Errorf("default cooldown %v", got)
	}
}

type fixture struct {
	st  *sqlitestore.Store
	clk *clock.Fake
	b   *breaker.Breakers
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := clock.NewFake(time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC))
	return &fixture{st: st, clk: clk, b: &breaker.Breakers{Store: st, Clock: clk}}
}

func TestGateOpenHalfOpenClose(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.st.PutAccount(ctx, store.Account{Tenant: "t", ID: "a", RatePerSec: 1, Breaker: store.BreakerConfig{CooldownSec: 10}}); err != nil {
		t.Fatal(err)
	}
	if d, err := f.b.Gate(ctx, "t", "a", "s1"); err != nil || !d.Allow || d.Probe {
		t.Fatalf("closed: %+v %v", d, err)
	}
	if _, err := f.b.Open(ctx, "t", "a", "test"); err != nil {
		t.Fatal(err)
	}
	d, err := f.b.Gate(ctx, "t", "a", "s1")
	if err != nil || d.Allow || d.Wait != 10*time.Second {
		t.Fatalf("open: %+v %v", d, err)
	}
	f.clk.Advance(10 * time.Second)
	if d, _ := f.b.Gate(ctx, "t", "a", "s1"); !d.Allow || !d.Probe {
		t.Fatalf("after cool-down s1 should probe: %+v", d)
	}
	if d, _ := f.b.Gate(ctx, "t", "a", "s2"); d.Allow {
		t.Fatalf("s2 must wait while s1 probes: %+v", d)
	}
	if err := f.b.ProbeResult(ctx, "t", "a", "s1", false); err != nil {
		t.Fatal(err)
	}
	br, _ := f.st.GetBreaker(ctx, "t", "a")
	if br.State != store.BreakerOpen || br.Opens != 2 || br.Until.Sub(f.clk.Now()) != 20*time.Second {
		t.Fatalf("after a failed probe: %+v", br)
	}
	f.clk.Advance(20 * time.Second)
	if d, _ := f.b.Gate(ctx, "t", "a", "s2"); !d.Allow || !d.Probe {
		t.Fatalf("s2 probes next: %+v", d)
	}
	if err := f.b.ProbeResult(ctx, "t", "a", "s2", true); err != nil {
		t.Fatal(err)
	}
	br, _ = f.st.GetBreaker(ctx, "t", "a")
	if br.State != store.BreakerClosed || br.Opens != 0 {
		t.Fatalf("after a good probe: %+v", br)
	}
	// Every transition is in the history, newest first, with its time and
	// reason; the probe takeover check (s2 waiting) is not a transition.
	h, err := f.st.ListBreakerHistory(ctx, "t", "a")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	want := []struct {
		from, to store.BreakerState
		at       time.Duration
		reason   string
		opens    int
	}{
		{store.BreakerHalfOpen, store.BreakerClosed, 30 * time.Second, "probe succeeded", 0},
		{store.BreakerOpen, store.BreakerHalfOpen, 30 * time.Second, "cool-down over: probing", 2},
		{store.BreakerHalfOpen, store.BreakerOpen, 10 * time.Second, "probe failed", 2},
		{store.BreakerOpen, store.BreakerHalfOpen, 10 * time.Second, "cool-down over: probing", 1},
		{store.BreakerClosed, store.BreakerOpen, 0, "test", 1},
	}
	if len(h) != len(want) {
		t.Fatalf("history has %d transitions, want %d: %+v", len(h), len(want), h)
	}
	for i, w := range want {
		tr := h[i]
		if tr.From != w.from || tr.To != w.to || !tr.At.Equal(t0.Add(w.at)) || tr.Reason != w.reason || tr.Opens != w.opens || tr.Seq != int64(len(want)-i) {
			t.Errorf("history[%d] = %+v, want %s→%s at +%s (%q, opens %d)", i, tr, w.from, w.to, w.at, w.reason, w.opens)
		}
	}
	if h[2].Until != t0.Add(30*time.Second) {
		t.Errorf("reopen's cool-down end = %s, want +30s", h[2].Until)
	}
	// Other accounts were never affected.
	if d, _ := f.b.Gate(ctx, "t", "b", "s9"); !d.Allow {
		t.Fatalf("other account: %+v", d)
	}
}

func TestSilentProbeIsTakenOver(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	_, _ = f.st.PutAccount(ctx, store.Account{Tenant: "t", ID: "a", RatePerSec: 1, Breaker: store.BreakerConfig{CooldownSec: 1}})
	_, _ = f.b.Open(ctx, "t", "a", "test")
	f.clk.Advance(time.Second)
	if d, _ := f.b.Gate(ctx, "t", "a", "s1"); !d.Probe {
		t.Fatal("s1 should probe")
	}
	f.clk.Advance(2 * time.Minute) // s1 died
	if d, _ := f.b.Gate(ctx, "t", "a", "s2"); !d.Allow || !d.Probe {
		t.Fatalf("s2 should take the probe over: %+v", d)
	}
}

// TestCheckOpensOnFailureRate: the scheduled check opens the breaker of an
// account whose attempts since the previous check failed at or above its
// failure rate, with at least min_samples attempts; below either, not.
func TestCheckOpensOnFailureRate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, a := range []string{"bad", "fine", "few"} {
		_, _ = f.st.PutAccount(ctx, store.Account{Tenant: "t", ID: a, RatePerSec: 10,
			Breaker: store.BreakerConfig{FailureRate: 0.5, MinSamples: 20, CooldownSec: 60}})
	}
	job := store.Job{ID: "j1", Tenant: "t", IdempotencyKey: "k", RequestHash: "h", Status: store.JobCreating, Total: 3, ShardCount: 3, CreatedAt: f.clk.Now()}
	var shards []store.Shard
	for i, a := range []string{"bad", "fine", "few"} {
		shards = append(shards, store.Shard{Index: i, Account: a, Status: store.ShardRunning, Size: 1, Counts: store.Counts{Pending: 1}, SlowFactor: 1, LastAdvancedAt: f.clk.Now()})
	}
	if _, err := f.st.CreateJob(ctx, store.CreateJobParams{Job: job, Shards: shards}); err != nil {
		t.Fatal(err)
	}
	advance := func(idx int, attempts, failures int64) {
		t.Helper()
		sh, err := f.st.BeginTurn(ctx, store.BeginTurnParams{JobID: "j1", Index: idx, Turn: 1, MessageID: "m", At: f.clk.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.st.AdvanceShard(ctx, store.AdvanceShardParams{JobID: "j1", Index: idx, Turn: sh.Turn, Epoch: sh.Epoch,
			At: f.clk.Now(), Attempts: attempts, AttemptFailures: failures}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := f.b.Check(ctx) // first check: snapshot only
	if err != nil || rep.Opened != 0 || rep.Accounts != 3 {
		t.Fatalf("first check %+v %v", rep, err)
	}
	f.clk.Advance(time.Minute)
	advance(0, 40, 30) // 75% over 40
	advance(1, 40, 10) // 25%
	advance(2, 10, 10) // 100% but only 10 samples
	rep, err = f.b.Check(ctx)
	if err != nil || rep.Opened != 1 {
		t.Fatalf("second check %+v %v", rep, err)
	}
	for acct, want := range map[string]store.BreakerState{"bad": store.BreakerOpen, "fine": store.BreakerClosed, "few": store.BreakerClosed} {
		br, _ := f.st.GetBreaker(ctx, "t", acct)
		state := br.State
		if state == "" {
			state = store.BreakerClosed
		}
		if state != want {
			t.Errorf("%s: %s, want %s", acct, state, want)
		}
		h, err := f.st.ListBreakerHistory(ctx, "t", acct)
		if err != nil {
			t.Fatal(err)
		}
		if want == store.BreakerOpen && (len(h) != 1 || h[0].FailureRate != 0.75 || h[0].Attempts != 40 || h[0].To != store.BreakerOpen) {
			t.Errorf("%s: history %+v, want one open at 75%% over 40 attempts", acct, h)
		}
		if want == store.BreakerClosed && len(h) != 0 {
			t.Errorf("%s: history %+v, want none (window saves are no transitions)", acct, h)
		}
	}
}

// TestChecksNeverOverlap: a check fired while another holds the lease
// (a slow check overrunning its minute) does nothing; once the first
// releases it, or its lease expires after a crash, checks run again.
func TestChecksNeverOverlap(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.st.AcquireLease(ctx, store.AcquireLeaseParams{Name: breaker.CheckLease, Holder: "running-check",
		Now: f.clk.Now(), Until: f.clk.Now().Add(2 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	rep, err := f.b.Check(ctx)
	if err != nil || !rep.Skipped {
		t.Fatalf("check while another runs: %+v %v, want skipped", rep, err)
	}
	f.clk.Advance(3 * time.Minute) // the other check died without releasing
	if rep, err := f.b.Check(ctx); err != nil || rep.Skipped {
		t.Fatalf("check after the lease expired: %+v %v", rep, err)
	}
	// The lease was released: the next check runs at once.
	if rep, err := f.b.Check(ctx); err != nil || rep.Skipped {
		t.Fatalf("check after a finished one: %+v %v", rep, err)
	}
}
