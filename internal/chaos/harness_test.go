package chaos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/providerfault"
	"github.com/qunfa/qunfa/internal/provider/wecomapi"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/queuefault"
	"github.com/qunfa/qunfa/internal/queue/sqlitequeue"
	"github.com/qunfa/qunfa/internal/reconcile"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/sqlitestore"
	"github.com/qunfa/qunfa/internal/store/storefault"
	"github.com/qunfa/qunfa/internal/submit"
)

const tenant = "chaos"

var t0 = time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC)

// backend opens the store and queue of one run: SQLite and the embedded
// queue, or DynamoDB on dynalite and SQS on fauxqs (dynamodb_test.go).
// Both keep time on the run's fake clock.
type backend func(t *testing.T, dir string, clk *clock.Fake) (store.Store, queue.Queue)

func sqliteBackend(t *testing.T, dir string, clk *clock.Fake) (store.Store, queue.Queue) {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	q, err := sqlitequeue.Open(ctx, filepath.Join(dir, "queue.db"), sqlitequeue.Options{
		Name: "work", DeadLetter: "work-dlq", MaxReceiveCount: 1000, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return st, q
}

// run is one chaos run: the pipeline, its faults and what the judge needs.
type run struct {
	t       *testing.T
	seed    uint64
	rng     *rand.Rand
	rngMu   sync.Mutex
	clk     *clock.Fake
	log     *slog.Logger
	logPath string

	inner  store.Store // no faults: the judge's view
	sfault *storefault.Store
	qfault *queuefault.Queue
	pfault *providerfault.Provider
	mock   *mockprovider.Mock
	queue  queue.Queue

	sender     *sender.Sender
	reconciler *reconcile.Reconciler
	breakers   *breaker.Breakers
	control    *control.Controller

	accounts []string
	noLookup []string // accounts whose provider has no status look-up
	jobs     []store.JobView
	// keepPaused: jobs the operator paused and left paused at the heal.
	keepPaused map[string]bool
	healed     bool
	crashes    atomic.Int64
	actions    map[string]int
	actionsMu  sync.Mutex
}

// intn, float and chance draw from the run's seeded source (safe from any
// goroutine; the draws' order follows the driver's, which is sequential
// where it matters).
func (r *run) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

func (r *run) float() float64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Float64()
}

func (r *run) chance(p float64) bool { return r.float() < p }

func (r *run) between(lo, hi float64) float64 { return lo + r.float()*(hi-lo) }

// lockedFloat is a seeded source of floats in [0,1) for concurrent turns
// (backoff jitter), apart from the driver's draws.
func lockedFloat(seed uint64) func() float64 {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed^0x51))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return rng.Float64()
	}
}

// newRun builds the pipeline of one seed on a backend.
func newRun(t *testing.T, seed uint64, open backend) *run {
	t.Helper()
	ctx := context.Background()
	r := &run{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0xc4a05)), clk: clock.NewFake(t0),
		keepPaused: map[string]bool{}, actions: map[string]int{}}
	dir := t.TempDir()
	r.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("QUNFA_TEST_LOG") != "" {
		r.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var q queue.Queue
	r.inner, q = open(t, dir, r.clk)
	r.logPath = filepath.Join(dir, "deliveries.jsonl")
	var err error
	r.mock, err = mockprovider.New(mockprovider.Config{LogPath: r.logPath, Clock: r.clk, Logger: r.log,
		Rand: rand.NewPCG(seed, seed^0x3a3a)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.mock.Handler())
	t.Cleanup(func() { r.mock.Close(); srv.Close() })
	prov, err := wecomapi.New(wecomapi.Config{BaseURL: srv.URL, ResponseTimeout: 100 * time.Millisecond, Logger: r.log})
	if err != nil {
		t.Fatal(err)
	}

	// Faults: each kind on in some runs, at a rate drawn per run.
	some := func(p, hi float64) float64 {
		if r.chance(p) {
			return r.between(0, hi)
		}
		return 0
	}
	r.sfault = storefault.New(r.inner, storefault.Config{Seed: seed ^ 1,
		ErrorRatio: some(0.6, 0.06), LostAnswerRatio: some(0.6, 0.06),
		LatencyRatio: some(0.5, 0.2), Latency: 50 * time.Millisecond, Clock: r.clk})
	r.qfault = queuefault.New(q, queuefault.Config{Seed: seed ^ 2, DuplicateRatio: some(0.6, 0.3), ExpireRatio: some(0.6, 0.3)})
	r.queue = r.qfault
	r.pfault = providerfault.New(prov, providerfault.Config{Seed: seed ^ 3,
		BeforeRatio: some(0.6, 0.15), AfterRatio: some(0.6, 0.15), StatusErrorRatio: some(0.5, 0.3)})

	r.breakers = &breaker.Breakers{Store: r.sfault, Clock: r.clk, Log: r.log}
	r.sender = &sender.Sender{Store: r.sfault, Queue: r.queue, Provider: r.pfault, Clock: r.clk, Log: r.log,
		Breakers: r.breakers, Rand: lockedFloat(seed ^ 0x7177), Sizers: &sender.Sizers{}, Accounts: &sender.AccountReads{},
		Config: sender.Config{
			ClaimBatch: 1 + r.intn(8), Concurrency: 4, MaxAttempts: 3,
			BackoffBase: time.Second, BackoffCap: 4 * time.Second, TurnDuration: 10 * time.Second,
		}}
	// SettleAfter is far above what a step can move the fake clock while
	// a call is in flight (turns' in-handler waits move it too), so the
	// reconciler never looks up an item whose call has not answered — as
	// the real settle delay exceeds the provider's response timeout.
	r.reconciler = &reconcile.Reconciler{Store: r.sfault, Queue: r.queue, Provider: r.pfault, Clock: r.clk, Log: r.log,
		StaleAfter: 30 * time.Second, SettleAfter: 2 * time.Minute, PageSize: 1 + r.intn(50), Lookups: 1 + r.intn(8),
		LeaseFor: 10 * time.Minute}
	r.control = &control.Controller{Store: r.sfault, Queue: r.queue, Clock: r.clk, Log: r.log}

	// Accounts, each with its own mock faults.
	for i := range 1 + r.intn(3) {
		id := fmt.Sprintf("acct-%d", i)
		r.accounts = append(r.accounts, id)
		rate := r.between(20, 500)
		a := store.Account{Tenant: tenant, ID: id, RatePerSec: rate, Burst: rate,
			MaxRecipientsPerCall: []int{1, 1, 3}[r.intn(3)]}
		if r.chance(0.3) {
			// Recipients are shared across jobs (user-0, user-1, …): a cap
			// abandons some items (frequency_capped), charged atomically.
			a.FrequencyCap = store.FrequencyCap{Max: 1 + r.intn(2), WindowSec: 3600}
		}
		if r.chance(0.3) {
			a.Breaker = store.BreakerConfig{ConsecutiveFailures: 3 + r.intn(8), CooldownSec: 5 + r.intn(30),
				FailureRate: 0.5, MinSamples: 20}
		}
		if err := r.inner.(store.TenantStore).GrantAccount(ctx, tenant, id, r.clk.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := r.inner.PutAccount(ctx, a); err != nil {
			t.Fatal(err)
		}
		if r.chance(0.15) {
			// No status look-up: items whose answer was lost go under
			// review, for the operator.
			r.noLookup = append(r.noLookup, id)
		}
		if err := r.mock.SetBehaviour(id, r.mockFaults(id)); err != nil {
			t.Fatal(err)
		}
	}

	// Jobs.
	sub := &submit.Submitter{Store: r.inner, Queue: r.queue, Clock: r.clk, Log: r.log,
		Limits: submit.Limits{ShardSplit: 5 + r.intn(30)}}
	for j := range 1 + r.intn(3) {
		var rcs []submit.Recipient
		n := 3 + r.intn(40)
		for i := range n {
			rcs = append(rcs, submit.Recipient{Account: r.accounts[r.intn(len(r.accounts))], To: fmt.Sprintf("user-%d", i),
				Vars: map[string]string{"n": fmt.Sprint(i)}})
		}
		req := submit.Request{Name: fmt.Sprintf("chaos %d", j), Template: "hi {{n}}", Recipients: rcs}
		if r.chance(0.25) {
			req.Budget = int64(1 + r.intn(n))
		}
		if r.chance(0.2) {
			req.RatePerSec = r.between(5, 100)
		}
		res, err := sub.Submit(ctx, submit.Params{Tenant: tenant, CreatedBy: "chaos", IdempotencyKey: fmt.Sprintf("chaos-%d", j), Request: req})
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		r.jobs = append(r.jobs, res.Job)
	}
	return r
}

// calm is an account's mock behaviour without faults: it keeps only
// whether the account has a status look-up.
func (r *run) calm(id string) mockprovider.Behaviour {
	var b mockprovider.Behaviour
	if slices.Contains(r.noLookup, id) {
		no := false
		b.StatusLookup = &no
	}
	return b
}

// mockFaults draws an account's mock behaviour under faults.
func (r *run) mockFaults(id string) mockprovider.Behaviour {
	b := r.calm(id)
	if r.chance(0.4) {
		b.GatewayErrors = []mockprovider.GatewayError{{Status: 502, Ratio: r.between(0, 0.1), AfterDelivery: r.chance(0.7)}}
	}
	if r.chance(0.4) {
		b.Errors = append(b.Errors, mockprovider.InjectedError{Errcode: mockprovider.CodeSystemBusy, Ratio: r.between(0, 0.15)})
	}
	if r.chance(0.3) {
		b.Errors = append(b.Errors, mockprovider.InjectedError{Errcode: mockprovider.CodeRecipientInvalid, Ratio: r.between(0, 0.1)})
	}
	if r.chance(0.2) {
		b.Errors = append(b.Errors, mockprovider.InjectedError{Errcode: mockprovider.CodeFrequencyLimit, Ratio: r.between(0, 0.15)})
	}
	if r.chance(0.15) {
		b.TimeoutRatio = r.between(0, 0.05) // lost answers: each costs a real response timeout
	}
	if r.chance(0.2) {
		b.StatusDown = true
	}
	return b
}

// heal stops every fault. The operator then settles the jobs: most paused
// jobs get budget for all their items and are resumed; some stay paused.
func (r *run) heal(ctx context.Context) {
	r.healed = true
	r.sfault.Heal()
	r.qfault.Heal()
	r.pfault.Heal()
	for _, a := range r.accounts {
		if err := r.mock.SetBehaviour(a, r.calm(a)); err != nil {
			r.t.Fatal(err)
		}
	}
	for _, j := range r.jobs {
		v, err := r.inner.GetJob(ctx, j.Job.ID)
		if err != nil {
			r.t.Fatal(err)
		}
		if v.Job.Status == store.JobPaused && v.Job.PauseReason == store.PauseManual && r.chance(0.2) {
			r.keepPaused[j.Job.ID] = true
			continue
		}
		if store.JobFinal(v.Job.Status) {
			continue
		}
		if v.Job.Budget > 0 {
			b := v.Job.Total * 4 // retries use budget too
			if _, err := r.control.UpdateLimits(ctx, j.Job.ID, nil, &b); err != nil {
				r.t.Fatalf("raise budget at heal: %v", err)
			}
		}
		if v.Job.Status == store.JobPaused {
			if _, err := r.control.Resume(ctx, j.Job.ID); err != nil && !errors.Is(err, control.ErrNotAllowed) {
				r.t.Fatalf("resume at heal: %v", err)
			}
		}
	}
}

var errCrash = errors.New("chaos: sender crashed")

// crashingStore is a sender's store that "dies" after a number of calls:
// from then on every call fails, like a process killed mid-turn. What it
// wrote stays; the turn's memory is lost with its message.
type crashingStore struct {
	store.Store
	left atomic.Int64
}

func (c *crashingStore) alive() error {
	if c.left.Add(-1) < 0 {
		return errCrash
	}
	return nil
}

func crashCall[T any](c *crashingStore, call func() (T, error)) (T, error) {
	if err := c.alive(); err != nil {
		var zero T
		return zero, err
	}
	return call()
}

func (c *crashingStore) BeginTurn(ctx context.Context, p store.BeginTurnParams) (store.Shard, error) {
	return crashCall(c, func() (store.Shard, error) { return c.Store.BeginTurn(ctx, p) })
}

func (c *crashingStore) GetJobRecord(ctx context.Context, id string) (store.Job, error) {
	return crashCall(c, func() (store.Job, error) { return c.Store.GetJobRecord(ctx, id) })
}

func (c *crashingStore) ClaimItems(ctx context.Context, p store.ClaimItemsParams) (store.ClaimItemsResult, error) {
	return crashCall(c, func() (store.ClaimItemsResult, error) { return c.Store.ClaimItems(ctx, p) })
}

func (c *crashingStore) UpdateItems(ctx context.Context, p store.UpdateItemsParams) (store.UpdateItemsResult, error) {
	return crashCall(c, func() (store.UpdateItemsResult, error) { return c.Store.UpdateItems(ctx, p) })
}

func (c *crashingStore) AdvanceShard(ctx context.Context, p store.AdvanceShardParams) (store.Shard, error) {
	return crashCall(c, func() (store.Shard, error) { return c.Store.AdvanceShard(ctx, p) })
}

func (c *crashingStore) TakeTokens(ctx context.Context, p store.TakeTokensParams) (store.TakeTokensResult, error) {
	return crashCall(c, func() (store.TakeTokensResult, error) { return c.Store.TakeTokens(ctx, p) })
}

func (c *crashingStore) ReserveBudget(ctx context.Context, id string, n int64) (store.BudgetGrant, error) {
	return crashCall(c, func() (store.BudgetGrant, error) { return c.Store.ReserveBudget(ctx, id, n) })
}

func (c *crashingStore) TransitionShard(ctx context.Context, p store.TransitionShardParams) (store.Shard, error) {
	return crashCall(c, func() (store.Shard, error) { return c.Store.TransitionShard(ctx, p) })
}

func (c *crashingStore) ChargeFrequency(ctx context.Context, p store.ChargeFrequencyParams) (store.ChargeFrequencyResult, error) {
	return crashCall(c, func() (store.ChargeFrequencyResult, error) { return c.Store.ChargeFrequency(ctx, p) })
}

func (c *crashingStore) TransitionJob(ctx context.Context, p store.TransitionJobParams) (store.Job, error) {
	return crashCall(c, func() (store.Job, error) { return c.Store.TransitionJob(ctx, p) })
}

func (c *crashingStore) MarkShardDirty(ctx context.Context, id string, i int) (store.Shard, error) {
	return crashCall(c, func() (store.Shard, error) { return c.Store.MarkShardDirty(ctx, id, i) })
}

func (c *crashingStore) AddShardCounts(ctx context.Context, p store.AddShardCountsParams) (store.Shard, error) {
	return crashCall(c, func() (store.Shard, error) { return c.Store.AddShardCounts(ctx, p) })
}

func (c *crashingStore) GetJob(ctx context.Context, id string) (store.JobView, error) {
	return crashCall(c, func() (store.JobView, error) { return c.Store.GetJob(ctx, id) })
}

func (c *crashingStore) RecountShard(ctx context.Context, id string, i int) (store.Shard, error) {
	return crashCall(c, func() (store.Shard, error) { return c.Store.RecountShard(ctx, id, i) })
}

// work runs one worker's turn of a received message, like the event
// source: Done deletes it, a hand-back leaves it invisible for its delay,
// an error (or a crash) leaves it to come back when its visibility ends.
func (r *run) work(ctx context.Context, m queue.Message, crashAfter int) {
	s := r.sender
	if crashAfter >= 0 {
		cs := &crashingStore{Store: r.sfault}
		cs.left.Store(int64(crashAfter))
		// A copy of the sender with a crashing store: it shares the
		// process's state (the accounts' sizers) with the other turns.
		s2 := *r.sender
		s2.Store = cs
		s = &s2
	}
	res, err := s.HandleTurn(ctx, sender.Message{ID: m.ID, Body: m.Body, ReceiptHandle: m.ReceiptHandle, ReceiveCount: m.ReceiveCount})
	r.log.Debug("chaos: worked", slog.String("message", m.ID), slog.String("body", string(m.Body)), slog.Int("receives", m.ReceiveCount),
		slog.Int("crash_after", crashAfter), slog.String("reason", res.Reason), slog.Any("err", err))
	switch {
	case errors.Is(err, errCrash):
		r.crashes.Add(1)
		return
	case err != nil:
		if r.healed {
			r.t.Errorf("turn failed after the heal: %v", err)
		}
		return
	}
	if res.Disposition == sender.Done {
		if err := r.queue.Delete(ctx, m.ReceiptHandle); err != nil && !errors.Is(err, queue.ErrNotFound) && r.healed {
			r.t.Errorf("delete a done message after the heal: %v", err)
		}
	}
}

// step is one beat of the run: the clock moves, the workers take what the
// queue has (a duplicate delivery is worked by two at once), and the
// reconciler, the breaker's check and an operator act alongside.
func (r *run) step(ctx context.Context, i int, workers int) {
	adv := time.Duration(r.between(200, 3000)) * time.Millisecond
	if r.healed {
		adv = 5 * time.Second
	}
	r.clk.Advance(adv)
	msgs, err := r.queue.Receive(ctx, queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Minute})
	if err != nil && r.healed {
		r.t.Fatalf("receive after the heal: %v", err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, workers)
	for _, m := range msgs {
		crashAfter := -1
		if !r.healed && r.chance(0.12) {
			crashAfter = r.intn(14)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r.work(ctx, m, crashAfter)
		}()
	}
	if i%4 == 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.reconciler.Run(ctx); err != nil && r.healed {
				r.t.Errorf("reconcile after the heal: %v", err)
			}
		}()
	}
	if i%10 == 9 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.breakers.Check(ctx); err != nil && r.healed {
				r.t.Errorf("breaker check after the heal: %v", err)
			}
		}()
	}
	op := !r.healed && r.chance(0.15)
	jobIdx, what := r.intn(len(r.jobs)), r.intn(100)
	if op || r.healed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if op {
				r.operate(ctx, r.jobs[jobIdx].Job.ID, what)
			}
			r.resolveUnderReview(ctx)
		}()
	}
	wg.Wait()
}

// operate is one operator action on a job while faults run. Errors are
// the operator's to see (a refused command, an injected store fault).
func (r *run) operate(ctx context.Context, jobID string, what int) {
	var name string
	var err error
	switch {
	case what < 25:
		name = "pause"
		_, err = r.control.Pause(ctx, jobID)
	case what < 50:
		name = "resume"
		_, err = r.control.Resume(ctx, jobID)
	case what < 53:
		name = "cancel"
		_, err = r.control.Cancel(ctx, jobID)
	case what < 68:
		name = "redrive"
		cat := store.CategoryExhausted
		if what%2 == 0 {
			cat = store.CategoryPermanent
		}
		var n int
		n, err = r.control.Redrive(ctx, jobID, cat)
		name += fmt.Sprintf(" %s (%d)", cat, n)
	case what < 84:
		name = "budget"
		b := int64(what%7) * 5 // 0 = none
		_, err = r.control.UpdateLimits(ctx, jobID, nil, &b)
	default:
		name = "rate"
		rate := float64(what % 4 * 20) // 0 = no cap
		_, err = r.control.UpdateLimits(ctx, jobID, &rate, nil)
	}
	r.log.Info("chaos: operator", slog.String("job", jobID), slog.String("action", name), slog.Any("err", err))
	name, _, _ = strings.Cut(name, " ")
	r.actionsMu.Lock()
	r.actions[name]++
	r.actionsMu.Unlock()
}

// resolveUnderReview is a careful operator: every item sent without a
// confirmed answer and put under review is resolved by what the provider
// really did (the mock's log) — delivered, or resend.
func (r *run) resolveUnderReview(ctx context.Context) {
	for _, j := range r.jobs {
		page, err := r.inner.ListItems(ctx, store.ListItemsParams{JobID: j.Job.ID, Status: store.ItemSubmitted, Category: store.CategoryUncertain, Limit: 1000})
		if err != nil {
			continue
		}
		for _, it := range page.Items {
			if !store.UnderReview(it) {
				continue
			}
			how := control.Resend
			if r.mock.Delivered(sender.MessageKey(j.Job.ID, it.Seq)) {
				how = control.Delivered
			}
			if _, err := r.control.Resolve(ctx, j.Job.ID, it.Seq, how); err == nil {
				r.actionsMu.Lock()
				r.actions["resolve "+string(how)]++
				r.actionsMu.Unlock()
			}
		}
	}
}

// settled reports whether the run may stop: every job final or paused,
// with nothing left submitted, nothing pending unless paused, and no shard
// dirty. A dirty shard's counts are not to be trusted yet: a turn that
// died (its message comes back) or an outside change that died (the
// reconciler's sweep of final shards) has yet to be repaired. A shard of a
// paused job may stay dirty (its next turn, at resume, recounts it):
// pausedDirty reports that only such shards are left, for the caller to
// accept once they have stayed so for a while, leaving the judge to check
// their counts.
func (r *run) settled(ctx context.Context) (ok, pausedDirty bool) {
	for _, j := range r.jobs {
		v, err := r.inner.GetJob(ctx, j.Job.ID)
		if err != nil {
			r.t.Fatal(err)
		}
		// Items left submitted are settled by the reconciler (or put under
		// review and resolved by the operator), whatever the job's status;
		// a cancelled job's pending items are abandoned by its shards'
		// next turns, which may still be on their way.
		c := v.Counts()
		if c.Submitted > 0 || c.Pending > 0 && v.Job.Status != store.JobPaused || !store.JobFinal(v.Job.Status) && v.Job.Status != store.JobPaused {
			return false, false
		}
		for _, sh := range v.Shards {
			switch {
			case !sh.Dirty:
			case v.Job.Status == store.JobPaused:
				pausedDirty = true
			default:
				return false, false
			}
		}
	}
	return !pausedDirty, pausedDirty
}

// deliveries reads the mock's log: message key → number of deliveries.
func (r *run) deliveries() map[string]int {
	f, err := os.Open(r.logPath)
	if os.IsNotExist(err) {
		return map[string]int{}
	}
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var d mockprovider.Delivery
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			r.t.Fatalf("bad log line %q: %v", sc.Text(), err)
		}
		out[d.Key]++
	}
	return out
}

// judge checks every invariant of the suite and returns the violations.
func (r *run) judge(ctx context.Context, settledAfterHeal bool) []string {
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	log := r.deliveries()
	// 1. No message key delivered twice.
	for key, n := range log {
		if n > 1 {
			fail("key %s delivered %d times", key, n)
		}
	}
	for _, j := range r.jobs {
		v, err := r.inner.GetJob(ctx, j.Job.ID)
		if err != nil {
			r.t.Fatal(err)
		}
		var items []store.Item
		cursor := ""
		for {
			page, err := r.inner.ListItems(ctx, store.ListItemsParams{JobID: j.Job.ID, Cursor: cursor, Limit: 1000})
			if err != nil {
				r.t.Fatal(err)
			}
			items = append(items, page.Items...)
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		// 2. Every item terminal or visibly waiting, and its status true
		// to the provider: confirmed = delivered once; pending, failed,
		// abandoned = never delivered; submitted only under review or
		// in a paused job (settled by the reconciler, never resent).
		truth := map[int]*store.Counts{}
		var all store.Counts
		for _, it := range items {
			n := log[sender.MessageKey(j.Job.ID, it.Seq)]
			if truth[it.Shard] == nil {
				truth[it.Shard] = &store.Counts{}
			}
			c := truth[it.Shard]
			switch it.Status {
			case store.ItemConfirmed:
				c.Confirmed++
				if n != 1 {
					fail("job %s item %d confirmed but delivered %d times", j.Job.ID, it.Seq, n)
				}
			case store.ItemSubmitted:
				c.Submitted++
				if n > 1 {
					fail("job %s item %d submitted and delivered %d times", j.Job.ID, it.Seq, n)
				}
				if !store.UnderReview(it) {
					fail("job %s item %d left submitted (%+v), neither settled nor under review", j.Job.ID, it.Seq, it.Error)
				}
			case store.ItemPending:
				c.Pending++
				if n != 0 {
					fail("job %s item %d pending but delivered %d times", j.Job.ID, it.Seq, n)
				}
				if v.Job.Status != store.JobPaused {
					fail("job %s item %d pending in a %s job", j.Job.ID, it.Seq, v.Job.Status)
				}
			case store.ItemFailed:
				c.Failed++
				if n != 0 {
					fail("job %s item %d failed (%+v) but delivered %d times", j.Job.ID, it.Seq, it.Error, n)
				}
			case store.ItemAbandoned:
				c.Abandoned++
				if n != 0 {
					fail("job %s item %d abandoned (%+v) but delivered %d times", j.Job.ID, it.Seq, it.Error, n)
				}
			default:
				fail("job %s item %d in unknown status %q", j.Job.ID, it.Seq, it.Status)
			}
		}
		// 3. Counts per status equal to the items, per shard and per job,
		// adding up to the total.
		for _, sh := range v.Shards {
			want := store.Counts{}
			if truth[sh.Index] != nil {
				want = *truth[sh.Index]
			}
			all = all.Add(want)
			if sh.Counts != want {
				fail("job %s shard %d counts %+v, items say %+v", j.Job.ID, sh.Index, sh.Counts, want)
			}
		}
		if c := v.Counts(); c != all || c.Total() != v.Job.Total || int64(len(items)) != v.Job.Total {
			fail("job %s counts %+v (total %d), items say %+v (%d items)", j.Job.ID, c, v.Job.Total, all, len(items))
		}
		// 4. Every job finished within the bound after the heal, or
		// paused as the operator left it (or at its budget).
		switch {
		case store.JobFinal(v.Job.Status):
			if v.Job.Status == store.JobCancelled && all.Pending > 0 {
				fail("job %s cancelled with %d items pending", j.Job.ID, all.Pending)
				for _, sh := range v.Shards {
					fail("  shard %d %s %s turn %d counts %+v dirty %v", sh.Index, sh.Status, sh.PauseReason, sh.Turn, sh.Counts, sh.Dirty)
				}
			}
		case v.Job.Status == store.JobPaused && v.Job.PauseReason == store.PauseManual && r.keepPaused[j.Job.ID]:
		case v.Job.Status == store.JobPaused && v.Job.PauseReason == store.PauseBudget && v.Job.BudgetUsed >= v.Job.Budget:
		default:
			fail("job %s is %s (%s) with counts %+v after the heal; want final, or paused as the operator left it", j.Job.ID, v.Job.Status, v.Job.PauseReason, all)
			for _, sh := range v.Shards {
				fail("  shard %d %s %s turn %d counts %+v dirty %v", sh.Index, sh.Status, sh.PauseReason, sh.Turn, sh.Counts, sh.Dirty)
			}
		}
	}
	if !settledAfterHeal {
		fail("the run did not settle within the bound after the heal")
		for _, j := range r.jobs {
			v, err := r.inner.GetJob(ctx, j.Job.ID)
			if err != nil {
				r.t.Fatal(err)
			}
			fail("  job %s %s (%s) counts %+v", j.Job.ID, v.Job.Status, v.Job.PauseReason, v.Counts())
			for _, sh := range v.Shards {
				fail("    shard %d %s %s turn %d counts %+v dirty %v epoch %d", sh.Index, sh.Status, sh.PauseReason, sh.Turn, sh.Counts, sh.Dirty, sh.Epoch)
			}
		}
	}
	return bad
}

// summary describes a run's faults and actions, for a failure's report.
func (r *run) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "store %v, queue %v, provider %v, crashes %d", r.sfault.Injected(), r.qfault.Injected(), r.pfault.Injected(), r.crashes.Load())
	keys := make([]string, 0, len(r.actions))
	for k := range r.actions {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, ", %s %d", k, r.actions[k])
	}
	stats := r.mock.Stats()
	var calls, gw int64
	for _, s := range stats {
		calls += s.Calls
		gw += s.GatewayErrors
	}
	fmt.Fprintf(&b, ", mock calls %d gateway errors %d", calls, gw)
	return b.String()
}

// chaosRun is one whole run of a seed: faults for a while, then healing,
// then the bound, then the judge.
func chaosRun(t *testing.T, seed uint64, open backend) {
	ctx := context.Background()
	r := newRun(t, seed, open)
	workers := 2 + r.intn(4)
	healAt := 30 + r.intn(90)
	const bound = 400 // steps of 5 s after the heal: 33 fake minutes
	for i := range healAt {
		r.step(ctx, i, workers)
	}
	r.heal(ctx)
	// pausedDirtyFor: steps to wait on shards of paused jobs left dirty
	// (3 fake minutes: past a dead turn's message coming back).
	const pausedDirtyFor = 36
	settled, pausedDirtySince := false, -1
	for i := range bound {
		r.step(ctx, healAt+i, workers)
		if i%4 != 3 {
			continue
		}
		ok, pausedDirty := r.settled(ctx)
		switch {
		case ok:
			settled = true
		case !pausedDirty:
			pausedDirtySince = -1
		case pausedDirtySince < 0:
			pausedDirtySince = i
		case i-pausedDirtySince >= pausedDirtyFor:
			settled = true
		}
		if settled {
			break
		}
	}
	if bad := r.judge(ctx, settled); len(bad) > 0 {
		if len(bad) > 40 {
			bad = append(bad[:40], fmt.Sprintf("... and %d more", len(bad)-40))
		}
		t.Errorf("chaos seed %d broke the promises (replay: QUNFA_CHAOS_SEED=%d go test ./internal/chaos -run 'TestChaos' -v):\n  %s\nrun: %s",
			seed, seed, strings.Join(bad, "\n  "), r.summary())
		return
	}
	if testing.Verbose() {
		t.Logf("seed %d ok: %s", seed, r.summary())
	}
}

var _ provider.Provider = (*providerfault.Provider)(nil)
