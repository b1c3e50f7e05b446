package breaker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/store"
)

// raceStore runs beforeSave once, just before the next SaveBreaker reaches
// the store: another sender or check moving the breaker in between the
// read and the write.
type raceStore struct {
	store.Store
	mu         sync.Mutex
	beforeSave func()
	saves      int
	failSave   error
}

func (s *raceStore) SaveBreaker(ctx context.Context, b store.Breaker) (store.Breaker, error) {
	s.mu.Lock()
	hook := s.beforeSave
	s.beforeSave = nil
	s.saves++
	fail := s.failSave
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	if fail != nil {
		return store.Breaker{}, fail
	}
	return s.Store.SaveBreaker(ctx, b)
}

func (f *fixture) account(t *testing.T, id string, cfg store.BreakerConfig) {
	t.Helper()
	if _, err := f.st.PutAccount(context.Background(), store.Account{Tenant: "t", ID: id, RatePerSec: 10, Breaker: cfg}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) breaker(t *testing.T, account string) store.Breaker {
	t.Helper()
	br, err := f.st.GetBreaker(context.Background(), "t", account)
	if err != nil {
		t.Fatal(err)
	}
	return br
}

// cooledDown gives account a a cool-down of 1 s, opens its breaker and
// moves the clock to the cool-down's end: the next shard to ask probes.
func (f *fixture) cooledDown(t *testing.T) {
	t.Helper()
	f.account(t, "a", store.BreakerConfig{CooldownSec: 1})
	if _, err := f.b.Open(context.Background(), "t", "a", "test"); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(time.Second)
}

// racedBy is breakers whose next write of account a's breaker comes just
// after shard winner's Gate took the probe: another shard deciding between
// this one's read and its write.
func (f *fixture) racedBy(t *testing.T, winner string) *breaker.Breakers {
	other := &breaker.Breakers{Store: f.st, Clock: f.clk}
	rs := &raceStore{Store: f.st, beforeSave: func() {
		if d, err := other.Gate(context.Background(), "t", "a", winner); err != nil || !d.Probe {
			t.Errorf("%s: %+v %v", winner, d, err)
		}
	}}
	return &breaker.Breakers{Store: rs, Clock: f.clk}
}

func TestCooldownBoundaries(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cfg   int
		opens int
		want  time.Duration
	}{
		{"first open is the configured cool-down", 10, 1, 10 * time.Second},
		{"zero opens reads as the first", 10, 0, 10 * time.Second},
		{"second open doubles", 10, 2, 20 * time.Second},
		{"fourth open is eight times", 10, 4, 80 * time.Second},
		{"negative config is the default", -5, 1, breaker.DefaultCooldown},
		{"zero config is the default, doubled", 0, 2, 2 * breaker.DefaultCooldown},
		{"configured above the cap is capped", 7200, 1, breaker.MaxCooldown},
		{"exactly the cap stays", 3600, 3, breaker.MaxCooldown},
		{"doubling reaches the cap exactly", 1800, 2, breaker.MaxCooldown},
		{"doubling just below the cap", 1799, 2, 3598 * time.Second},
	} {
		if got := breaker.Cooldown(store.BreakerConfig{CooldownSec: tt.cfg}, tt.opens); got != tt.want {
			t.Errorf("%s: Cooldown(%ds, opens %d) = %v, want %v", tt.name, tt.cfg, tt.opens, got, tt.want)
		}
	}
}

// TestGateCooldownBoundary: an open breaker makes shards wait exactly until
// its cool-down ends, then the first shard to ask probes.
func TestGateCooldownBoundary(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.account(t, "a", store.BreakerConfig{CooldownSec: 30})
	opened, err := f.b.Open(ctx, "t", "a", "test")
	if err != nil {
		t.Fatal(err)
	}
	if !opened.Until.Equal(f.clk.Now().Add(30*time.Second)) || opened.Opens != 1 || opened.Reason != "test" {
		t.Fatalf("opened %+v", opened)
	}
	f.clk.Advance(30*time.Second - time.Nanosecond)
	d, err := f.b.Gate(ctx, "t", "a", "s1")
	if err != nil || d.Allow || d.Probe || d.Wait != time.Nanosecond || d.State.State != store.BreakerOpen {
		t.Fatalf("1ns before the end of the cool-down: %+v %v", d, err)
	}
	f.clk.Advance(time.Nanosecond)
	d, err = f.b.Gate(ctx, "t", "a", "s1")
	if err != nil || !d.Allow || !d.Probe || d.State.State != store.BreakerHalfOpen || d.State.ProbeShard != "s1" {
		t.Fatalf("at the end of the cool-down: %+v %v", d, err)
	}
	if br := f.breaker(t, "a"); br.State != store.BreakerHalfOpen || br.ProbeShard != "s1" || !br.UpdatedAt.Equal(f.clk.Now()) {
		t.Fatalf("stored after half-open: %+v", br)
	}
	// The probing shard asks again: still its probe, nothing changes.
	before := f.breaker(t, "a")
	d, err = f.b.Gate(ctx, "t", "a", "s1")
	if err != nil || !d.Allow || !d.Probe {
		t.Fatalf("probing shard again: %+v %v", d, err)
	}
	if after := f.breaker(t, "a"); after.Version != before.Version {
		t.Fatalf("asking again wrote the breaker: %+v → %+v", before, after)
	}
}

// TestGateProbeTakeoverBoundary: another shard waits probeWait while the
// probe is younger than a minute, and takes it over at exactly a minute.
func TestGateProbeTakeoverBoundary(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.cooledDown(t)
	if d, _ := f.b.Gate(ctx, "t", "a", "s1"); !d.Probe {
		t.Fatalf("s1 should probe: %+v", d)
	}
	f.clk.Advance(time.Minute - time.Nanosecond)
	d, err := f.b.Gate(ctx, "t", "a", "s2")
	if err != nil || d.Allow || d.Probe || d.Wait != 5*time.Second {
		t.Fatalf("s2 while s1's probe is 1ns short of a minute: %+v %v", d, err)
	}
	f.clk.Advance(time.Nanosecond)
	d, err = f.b.Gate(ctx, "t", "a", "s2")
	if err != nil || !d.Allow || !d.Probe || d.State.ProbeShard != "s2" {
		t.Fatalf("s2 after a minute of silence: %+v %v", d, err)
	}
	if br := f.breaker(t, "a"); br.ProbeShard != "s2" || !br.UpdatedAt.Equal(f.clk.Now()) || br.State != store.BreakerHalfOpen {
		t.Fatalf("stored after the take-over: %+v", br)
	}
	// s1 comes back: the probe is no longer its own.
	if d, _ := f.b.Gate(ctx, "t", "a", "s1"); d.Allow {
		t.Fatalf("s1 after losing its probe: %+v", d)
	}
	// s1's late result decides nothing; s2's does.
	if err := f.b.ProbeResult(ctx, "t", "a", "s1", true); err != nil {
		t.Fatal(err)
	}
	if br := f.breaker(t, "a"); br.State != store.BreakerHalfOpen {
		t.Fatalf("a stale probe result closed the breaker: %+v", br)
	}
}

// meltedStore reads every breaker in a state no version of qunfa wrote.
type meltedStore struct{ store.Store }

func (s meltedStore) GetBreaker(ctx context.Context, tenant, account string) (store.Breaker, error) {
	br, err := s.Store.GetBreaker(ctx, tenant, account)
	br.State = "melted"
	return br, err
}

// TestGateUnknownState: a breaker in a state the code does not know is an
// error, never a permission to send.
func TestGateUnknownState(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	b := &breaker.Breakers{Store: meltedStore{f.st}, Clock: f.clk}
	if d, err := b.Gate(ctx, "t", "a", "s1"); err == nil || d.Allow {
		t.Fatalf("unknown state: %+v %v", d, err)
	}
}

// TestGateRacesAnotherShard: two shards find the cool-down over at once;
// the one whose write loses reads again and waits for the winner's probe.
func TestGateRacesAnotherShard(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.cooledDown(t)
	b := f.racedBy(t, "winner")
	d, err := b.Gate(ctx, "t", "a", "loser")
	if err != nil || d.Allow || d.Probe || d.Wait != 5*time.Second {
		t.Fatalf("the shard that lost the race: %+v %v", d, err)
	}
	if br := f.breaker(t, "a"); br.ProbeShard != "winner" {
		t.Fatalf("probe belongs to %q, want winner", br.ProbeShard)
	}
}

// TestGateTakeoverRace: two shards take over a silent probe at once; one
// gets it.
func TestGateTakeoverRace(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.cooledDown(t)
	if d, _ := f.b.Gate(ctx, "t", "a", "dead"); !d.Probe {
		t.Fatal("dead should probe")
	}
	f.clk.Advance(2 * time.Minute)
	b := f.racedBy(t, "winner")
	if d, err := b.Gate(ctx, "t", "a", "loser"); err != nil || d.Allow {
		t.Fatalf("loser of the take-over: %+v %v", d, err)
	}
	if br := f.breaker(t, "a"); br.ProbeShard != "winner" {
		t.Fatalf("probe belongs to %q", br.ProbeShard)
	}
}

// TestGateStoreErrors: a failed write is an error, never an allowed send.
func TestGateStoreErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.cooledDown(t)
	boom := errors.New("boom")
	b := &breaker.Breakers{Store: &raceStore{Store: f.st, failSave: boom}, Clock: f.clk}
	if d, err := b.Gate(ctx, "t", "a", "s1"); !errors.Is(err, boom) || d.Allow {
		t.Fatalf("half-open write failed: %+v %v", d, err)
	}
	if _, err := f.b.Gate(ctx, "t", "a", "s1"); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(2 * time.Minute)
	if d, err := b.Gate(ctx, "t", "a", "s2"); !errors.Is(err, boom) || d.Allow {
		t.Fatalf("take-over write failed: %+v %v", d, err)
	}
	if _, err := b.Open(ctx, "t", "b", "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("open of an unknown account: %v", err)
	}
	f.account(t, "c", store.BreakerConfig{})
	if _, err := b.Open(ctx, "t", "c", "x"); !errors.Is(err, boom) {
		t.Fatalf("open write failed: %v", err)
	}
	// Endless conflicts end in ErrConflict after a bounded number of tries.
	conflict := &raceStore{Store: f.st, failSave: store.ErrConflict}
	b = &breaker.Breakers{Store: conflict, Clock: f.clk}
	if _, err := b.Open(ctx, "t", "c", "x"); !errors.Is(err, store.ErrConflict) || conflict.saves != 8 {
		t.Fatalf("open under endless conflicts: %v after %d saves", err, conflict.saves)
	}
}

// TestOpenIsIdempotent: opening an open breaker changes nothing and
// alerts once; a reopen after a failed probe doubles the cool-down and
// alerts again; a good probe closes it, alerts, and resets the doubling.
func TestOpenIsIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	rec := &alerttest.Recorder{}
	f.b.Alerts = rec
	f.account(t, "a", store.BreakerConfig{CooldownSec: 10})
	first, err := f.b.Open(ctx, "t", "a", "streak")
	if err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(time.Second)
	again, err := f.b.Open(ctx, "t", "a", "rate")
	if err != nil || again.Version != first.Version || again.Reason != "streak" || again.Opens != 1 {
		t.Fatalf("second open: %+v %v", again, err)
	}
	ev := rec.Of(alert.BreakerOpened)
	if len(ev) != 1 || ev[0].Tenant != "t" {
		t.Fatalf("opened alerts %+v", ev)
	}
	if d := ev[0].Detail.(alert.BreakerDetail); d.Account != "a" || d.Reason != "streak" || d.Opens != 1 || !d.Until.Equal(first.Until) {
		t.Fatalf("opened detail %+v", d)
	}
	f.clk.Advance(9 * time.Second)
	if d, _ := f.b.Gate(ctx, "t", "a", "s1"); !d.Probe {
		t.Fatalf("probe: %+v", d)
	}
	if err := f.b.ProbeResult(ctx, "t", "a", "s1", false); err != nil {
		t.Fatal(err)
	}
	br := f.breaker(t, "a")
	if br.State != store.BreakerOpen || br.Opens != 2 || !br.Until.Equal(f.clk.Now().Add(20*time.Second)) || br.Reason != "probe failed" || br.ProbeShard != "" {
		t.Fatalf("after a failed probe: %+v", br)
	}
	if n := len(rec.Of(alert.BreakerOpened)); n != 2 {
		t.Fatalf("%d opened alerts, want 2", n)
	}
	f.clk.Advance(20 * time.Second)
	if d, _ := f.b.Gate(ctx, "t", "a", "s1"); !d.Probe {
		t.Fatalf("second probe: %+v", d)
	}
	if err := f.b.ProbeResult(ctx, "t", "a", "s1", true); err != nil {
		t.Fatal(err)
	}
	br = f.breaker(t, "a")
	if br.State != store.BreakerClosed || br.Opens != 0 || br.ProbeShard != "" || br.Reason != "probe succeeded" {
		t.Fatalf("after a good probe: %+v", br)
	}
	if ev := rec.Of(alert.BreakerClosed); len(ev) != 1 || ev[0].Detail.(alert.BreakerDetail).Account != "a" {
		t.Fatalf("closed alerts %+v", ev)
	}
	// The doubling starts over.
	reopened, err := f.b.Open(ctx, "t", "a", "streak")
	if err != nil || reopened.Opens != 1 || !reopened.Until.Equal(f.clk.Now().Add(10*time.Second)) {
		t.Fatalf("open after a close: %+v %v", reopened, err)
	}
}

// TestProbeResultRacesAnotherDecision: the probe's result arrives after
// the breaker was reopened by someone else: nothing changes.
func TestProbeResultRacesAnotherDecision(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.cooledDown(t)
	if d, _ := f.b.Gate(ctx, "t", "a", "s1"); !d.Probe {
		t.Fatal("s1 should probe")
	}
	// Between the read and the write, an account-level error reopens it.
	rs := &raceStore{Store: f.st}
	rs.beforeSave = func() {
		br := f.breaker(t, "a")
		br.State, br.ProbeShard, br.Reason = store.BreakerOpen, "", "account error"
		if _, err := f.st.SaveBreaker(ctx, br); err != nil {
			t.Error(err)
		}
	}
	b := &breaker.Breakers{Store: rs, Clock: f.clk}
	if err := b.ProbeResult(ctx, "t", "a", "s1", true); err != nil {
		t.Fatal(err)
	}
	if br := f.breaker(t, "a"); br.State != store.BreakerOpen || br.Reason != "account error" {
		t.Fatalf("a probe result overrode a newer open: %+v", br)
	}
	if err := (&breaker.Breakers{Store: &raceStore{Store: f.st, failSave: errors.New("boom")}, Clock: f.clk}).ProbeResult(ctx, "t", "a", "s1", true); err != nil {
		t.Fatalf("result of a probe that is no longer s1's: %v", err)
	}
}

// TestReleaseProbe: a probe with nothing to send hands the probe back at
// once: the next shard probes without waiting a cool-down or a take-over.
func TestReleaseProbe(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.account(t, "a", store.BreakerConfig{CooldownSec: 10})
	_, _ = f.b.Open(ctx, "t", "a", "test")
	f.clk.Advance(10 * time.Second)
	if d, _ := f.b.Gate(ctx, "t", "a", "s1"); !d.Probe {
		t.Fatal("s1 should probe")
	}
	// Not the probing shard: nothing happens.
	if err := f.b.ReleaseProbe(ctx, "t", "a", "s2"); err != nil {
		t.Fatal(err)
	}
	if br := f.breaker(t, "a"); br.State != store.BreakerHalfOpen || br.ProbeShard != "s1" {
		t.Fatalf("released by another shard: %+v", br)
	}
	if err := f.b.ReleaseProbe(ctx, "t", "a", "s1"); err != nil {
		t.Fatal(err)
	}
	br := f.breaker(t, "a")
	if br.State != store.BreakerOpen || br.ProbeShard != "" || !br.Until.Equal(f.clk.Now()) || br.Opens != 1 {
		t.Fatalf("after release: %+v", br)
	}
	if d, _ := f.b.Gate(ctx, "t", "a", "s2"); !d.Allow || !d.Probe {
		t.Fatalf("s2 after the release: %+v", d)
	}
	boom := errors.New("boom")
	if err := (&breaker.Breakers{Store: &raceStore{Store: f.st, failSave: boom}, Clock: f.clk}).ReleaseProbe(ctx, "t", "a", "s2"); !errors.Is(err, boom) {
		t.Fatalf("release write failed: %v", err)
	}
	if err := (&breaker.Breakers{Store: &raceStore{Store: f.st, failSave: boom}, Clock: f.clk}).ProbeResult(ctx, "t", "a", "s2", true); !errors.Is(err, boom) {
		t.Fatalf("close write failed: %v", err)
	}
	conflict := &raceStore{Store: f.st, failSave: store.ErrConflict}
	if err := (&breaker.Breakers{Store: conflict, Clock: f.clk}).ReleaseProbe(ctx, "t", "a", "s2"); !errors.Is(err, store.ErrConflict) || conflict.saves != 8 {
		t.Fatalf("release under endless conflicts: %v after %d saves", err, conflict.saves)
	}
	conflict = &raceStore{Store: f.st, failSave: store.ErrConflict}
	if err := (&breaker.Breakers{Store: conflict, Clock: f.clk}).ProbeResult(ctx, "t", "a", "s2", true); !errors.Is(err, store.ErrConflict) || conflict.saves != 8 {
		t.Fatalf("close under endless conflicts: %v after %d saves", err, conflict.saves)
	}
	conflict = &raceStore{Store: f.st, failSave: store.ErrConflict}
	f.clk.Advance(2 * time.Minute)
	if d, err := (&breaker.Breakers{Store: conflict, Clock: f.clk}).Gate(ctx, "t", "a", "s3"); !errors.Is(err, store.ErrConflict) || d.Allow || conflict.saves != 8 {
		t.Fatalf("gate under endless conflicts: %+v %v after %d saves", d, err, conflict.saves)
	}
}

// checkJob creates a running job of one account's shards and begins a turn
// on each; it returns a function adding attempts and failures to a shard.
func (f *fixture) checkJob(t *testing.T, id, account string, shards int) func(idx int, attempts, failures int64) {
	t.Helper()
	ctx := context.Background()
	job := store.Job{ID: id, Tenant: "t", IdempotencyKey: id, RequestHash: "h", Status: store.JobCreating, Total: int64(shards), ShardCount: shards, CreatedAt: f.clk.Now()}
	var sh []store.Shard
	for i := range shards {
		sh = append(sh, store.Shard{Index: i, Account: account, Status: store.ShardRunning, Size: 1, Counts: store.Counts{Pending: 1}, SlowFactor: 1, LastAdvancedAt: f.clk.Now()})
	}
	if _, err := f.st.CreateJob(ctx, store.CreateJobParams{Job: job, Shards: sh}); err != nil {
		t.Fatal(err)
	}
	for i := range shards {
		if _, err := f.st.BeginTurn(ctx, store.BeginTurnParams{JobID: id, Index: i, Turn: 1, MessageID: "m", At: f.clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	return func(idx int, attempts, failures int64) {
		t.Helper()
		s, err := f.st.GetShard(ctx, id, idx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.st.AdvanceShard(ctx, store.AdvanceShardParams{JobID: id, Index: idx, Turn: 1, Epoch: s.Epoch,
			At: f.clk.Now(), Attempts: attempts, AttemptFailures: failures}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckWindowAndThresholds: the scheduled check judges the attempts
// made since its previous run (not all-time totals), at or above the
// failure rate and with at least min_samples attempts, summed over the
// account's shards; a threshold of 0 turns the trigger off; the first
// check only takes a snapshot; an open breaker is not reopened.
func TestCheckWindowAndThresholds(t *testing.T) {
	t.Parallel()
	type counts struct{ attempts, failures int64 }
	for _, tt := range []struct {
		name      string
		cfg       store.BreakerConfig
		before    counts // made before the first check (all-time, not in the window)
		window    counts // made between the first and the second check
		shards    int
		preOpened bool
		want      bool
		reason    string // of the opened breaker
	}{
		{"rate exactly at the threshold opens", store.BreakerConfig{FailureRate: 0.5, MinSamples: 20}, counts{}, counts{20, 10}, 1, false, true, "failure rate 50% over 20 attempts in 1m0s"},
		{"one failure below the rate does not", store.BreakerConfig{FailureRate: 0.5, MinSamples: 20}, counts{}, counts{20, 9}, 1, false, false, ""},
		{"exactly min_samples opens", store.BreakerConfig{FailureRate: 0.5, MinSamples: 20}, counts{}, counts{20, 20}, 1, false, true, "failure rate 100% over 20 attempts in 1m0s"},
		{"one sample short does not", store.BreakerConfig{FailureRate: 0.5, MinSamples: 20}, counts{}, counts{19, 19}, 1, false, false, ""},
		{"min_samples 0 needs one attempt", store.BreakerConfig{FailureRate: 0.5}, counts{}, counts{1, 1}, 1, false, true, "failure rate 100% over 1 attempts in 1m0s"},
		{"no attempts, no decision", store.BreakerConfig{FailureRate: 0.5}, counts{10, 10}, counts{}, 1, false, false, ""},
		{"failure_rate 0 is off", store.BreakerConfig{FailureRate: 0, MinSamples: 1}, counts{}, counts{100, 100}, 1, false, false, ""},
		{"old failures are outside the window", store.BreakerConfig{FailureRate: 0.5, MinSamples: 20}, counts{100, 100}, counts{40, 0}, 1, false, false, ""},
		{"new failures count though all-time is low", store.BreakerConfig{FailureRate: 0.5, MinSamples: 20}, counts{100, 0}, counts{20, 20}, 1, false, true, "failure rate 100% over 20 attempts in 1m0s"},
		{"shards of an account add up", store.BreakerConfig{FailureRate: 0.5, MinSamples: 20}, counts{}, counts{20, 20}, 2, false, true, "failure rate 100% over 20 attempts in 1m0s"},
		{"an open breaker is not reopened", store.BreakerConfig{FailureRate: 0.5, MinSamples: 1}, counts{}, counts{20, 20}, 1, true, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ctx := context.Background()
			rec := &alerttest.Recorder{}
			f.b.Alerts = rec
			tt.cfg.CooldownSec = 60
			f.account(t, "a", tt.cfg)
			f.account(t, "calm", tt.cfg)
			add := f.checkJob(t, "j", "a", tt.shards)
			f.checkJob(t, "j2", "calm", 1)
			spread := func(c counts) {
				for i := range tt.shards {
					n := int64(tt.shards)
					add(i, c.attempts/n, c.failures/n)
				}
			}
			spread(tt.before)
			rep, err := f.b.Check(ctx)
			if err != nil || rep.Opened != 0 || rep.Accounts != 2 {
				t.Fatalf("first check: %+v %v", rep, err)
			}
			if br := f.breaker(t, "a"); br.State == store.BreakerOpen || br.WindowAttempts != tt.before.attempts || br.WindowFailures != tt.before.failures || !br.WindowAt.Equal(f.clk.Now()) {
				t.Fatalf("first check's snapshot: %+v", br)
			}
			if tt.preOpened {
				if _, err := f.b.Open(ctx, "t", "a", "streak"); err != nil {
					t.Fatal(err)
				}
			}
			f.clk.Advance(time.Minute)
			spread(tt.window)
			rep, err = f.b.Check(ctx)
			if err != nil {
				t.Fatal(err)
			}
			br := f.breaker(t, "a")
			opened := rep.Opened == 1 && br.State == store.BreakerOpen && !tt.preOpened
			if opened != tt.want || (!tt.want && rep.Opened != 0) {
				t.Fatalf("second check: report %+v, breaker %+v; want opened %v", rep, br, tt.want)
			}
			if tt.want && br.Reason != tt.reason {
				t.Fatalf("reason %q, want %q", br.Reason, tt.reason)
			}
			if tt.preOpened && (br.Opens != 1 || br.Reason != "streak") {
				t.Fatalf("an open breaker was reopened: %+v", br)
			}
			wantAlerts := 0
			if tt.want || tt.preOpened {
				wantAlerts = 1
			}
			if n := len(rec.Of(alert.BreakerOpened)); n != wantAlerts {
				t.Fatalf("%d opened alerts, want %d", n, wantAlerts)
			}
			// The window moved on, also when the check opened the breaker.
			all := tt.before.attempts + tt.window.attempts
			if br.WindowAttempts != all || br.WindowFailures != tt.before.failures+tt.window.failures || !br.WindowAt.Equal(f.clk.Now()) {
				t.Fatalf("window after the second check: %+v", br)
			}
			if calm := f.breaker(t, "calm"); calm.State == store.BreakerOpen {
				t.Fatalf("another account opened: %+v", calm)
			}
			// Nothing new: the next check opens nothing more.
			f.clk.Advance(time.Minute)
			if rep, err := f.b.Check(ctx); err != nil || rep.Opened != 0 {
				t.Fatalf("third check %+v %v", rep, err)
			}
		})
	}
}

// TestCheckReadErrors: a check that cannot read what it judges fails
// instead of judging on partial totals.
func TestCheckReadErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.account(t, "a", store.BreakerConfig{FailureRate: 0.5, MinSamples: 1})
	f.checkJob(t, "j", "a", 1)
	boom := errors.New("boom")
	b := &breaker.Breakers{Store: &raceStore{Store: f.st, failSave: boom}, Clock: f.clk}
	if _, err := b.Check(ctx); !errors.Is(err, boom) {
		t.Fatalf("window write failed: %v", err)
	}
	// A conflict on the window write is someone else's newer write: fine.
	b = &breaker.Breakers{Store: &raceStore{Store: f.st, failSave: store.ErrConflict}, Clock: f.clk}
	if rep, err := b.Check(ctx); err != nil || rep.Accounts != 1 {
		t.Fatalf("window write conflict: %+v %v", rep, err)
	}
}

// TestCheckGoesOnPastAMissingAccount: running shards of an account the
// store no longer has (deleted while its job ran) are counted and left
// unjudged; every other account is still checked, and a failure rate
// over its threshold still opens its breaker.
func TestCheckGoesOnPastAMissingAccount(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.account(t, "bad", store.BreakerConfig{FailureRate: 0.5, MinSamples: 20, CooldownSec: 60})
	addBad := f.checkJob(t, "j", "bad", 1)
	addGone := f.checkJob(t, "j-gone", "gone", 1) // no such account
	rep, err := f.b.Check(ctx)
	if err != nil || rep.Accounts != 2 || rep.Missing != 1 || rep.Opened != 0 {
		t.Fatalf("first check: %+v %v", rep, err)
	}
	f.clk.Advance(time.Minute)
	addBad(0, 40, 30)
	addGone(0, 40, 40)
	rep, err = f.b.Check(ctx)
	if err != nil || rep.Accounts != 2 || rep.Missing != 1 || rep.Opened != 1 {
		t.Fatalf("second check: %+v %v", rep, err)
	}
	if br := f.breaker(t, "bad"); br.State != store.BreakerOpen {
		t.Fatalf("bad's breaker: %+v, want open", br)
	}
	if br := f.breaker(t, "gone"); br.State == store.BreakerOpen || !br.WindowAt.IsZero() {
		t.Fatalf("a missing account's breaker was written: %+v", br)
	}
}
