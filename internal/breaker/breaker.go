// Package breaker is the circuit breaker of sending accounts. An expired
// credential or a provider outage should stop an account within a few
// sends, not fail thousands of items: the breaker opens on a streak of
// failures, on an account-level error, or on a failure rate over a window
// (the scheduled check), and while it is open the account's shards pause
// (reason breaker). After the cool-down one shard sends a small probe: if
// it goes through the breaker closes and every shard resumes; if not it
// reopens with a doubled cool-down. Other accounts are never affected.
package breaker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/store"
)

// Defaults for accounts whose breaker config leaves a value at 0.
const (
	DefaultCooldown = 60 * time.Second
	// MaxCooldown caps the doubling of reopened breakers.
	MaxCooldown = time.Hour
	// ProbeSize is how many items a half-open probe sends.
	ProbeSize = 3
	// probeWait is how long other shards wait while one shard probes.
	probeWait = 5 * time.Second
	// probeTakeover: a probe with no result for this long is taken over by
	// another shard.
	probeTakeover = time.Minute
)

// Breakers reads and changes account breakers.
type Breakers struct {
	Store  store.Store
	Clock  clock.Clock
	Alerts alert.Publisher
	Log    *slog.Logger
}

func (b *Breakers) log() *slog.Logger {
	if b.Log != nil {
		return b.Log
	}
	return slog.Default()
}

// Decision is what a shard may do at a batch boundary.
type Decision struct {
	// Allow: send. With Probe, send at most ProbeSize items and report the
	// outcome with ProbeResult.
	Allow bool
	Probe bool
	// Wait: when not allowed, how long until asking again makes sense.
	Wait time.Duration
	// State is the breaker as read.
	State store.Breaker
}

// Gate decides whether a shard of an account may send now. shard names the
// asking shard (job/index), so a half-open probe belongs to one shard.
func (b *Breakers) Gate(ctx context.Context, tenant, account, shard string) (Decision, error) {
	for range 8 {
		br, err := b.Store.GetBreaker(ctx, tenant, account)
		if err != nil {
			return Decision{}, fmt.Errorf("read breaker of %s: %w", account, err)
		}
		now := b.Clock.Now()
		switch br.State {
		case "", store.BreakerClosed:
			return Decision{Allow: true, State: br}, nil
		case store.BreakerHalfOpen:
			if br.ProbeShard == shard {
				return Decision{Allow: true, Probe: true, State: br}, nil
			}
			if now.Sub(br.UpdatedAt) < probeTakeover {
				return Decision{Wait: probeWait, State: br}, nil
			}
			// The probing shard went silent (crashed, finished): take over.
			br.ProbeShard, br.UpdatedAt = shard, now
			saved, err := b.Store.SaveBreaker(ctx, br)
			if errors.Is(err, store.ErrConflict) {
				continue
			}
			if err != nil {
				return Decision{}, fmt.Errorf("take over the probe of %s: %w", account, err)
			}
			return Decision{Allow: true, Probe: true, State: saved}, nil
		case store.BreakerOpen:
			if now.Before(br.Until) {
				return Decision{Wait: br.Until.Sub(now), State: br}, nil
			}
			br.State, br.ProbeShard, br.UpdatedAt = store.BreakerHalfOpen, shard, now
			br.Transition = &store.BreakerTransition{From: store.BreakerOpen, To: store.BreakerHalfOpen, At: now,
				Reason: "cool-down over: probing", Opens: br.Opens}
			saved, err := b.Store.SaveBreaker(ctx, br)
			if errors.Is(err, store.ErrConflict) {
				continue // someone else moved it; read again
			}
			if err != nil {
				return Decision{}, fmt.Errorf("half-open breaker of %s: %w", account, err)
			}
			b.log().Info("breaker half-open: probing", slog.String("account", account), slog.String("shard", shard))
			return Decision{Allow: true, Probe: true, State: saved}, nil
		default:
			return Decision{}, fmt.Errorf("breaker of %s in unknown state %q", account, br.State)
		}
	}
	return Decision{}, fmt.Errorf("breaker of %s: %w", account, store.ErrConflict)
}

// Cooldown is the cool-down after the n-th open in a row (n ≥ 1): the
// configured one, doubled at every reopen, capped at MaxCooldown.
func Cooldown(cfg store.BreakerConfig, n int) time.Duration {
	d := time.Duration(cfg.CooldownSec) * time.Second
	if d <= 0 {
		d = DefaultCooldown
	}
	for i := 1; i < n && d < MaxCooldown; i++ {
		d *= 2
	}
	return min(d, MaxCooldown)
}

// Cause is why a breaker opens: the reason in words and, when one tripped
// it, the failure rate over a window of attempts or the streak of failed
// sends. The breaker history keeps them.
type Cause struct {
	Reason              string
	FailureRate         float64
	Attempts            int64
	ConsecutiveFailures int
}

// Open opens an account's breaker for reason (see OpenFor).
func (b *Breakers) Open(ctx context.Context, tenant, account, reason string) (store.Breaker, error) {
	return b.OpenFor(ctx, tenant, account, Cause{Reason: reason})
}

// OpenFor opens an account's breaker (no-op when already open), records
// the transition with its cause and publishes BreakerOpened.
func (b *Breakers) OpenFor(ctx context.Context, tenant, account string, cause Cause) (store.Breaker, error) {
	reason := cause.Reason
	acct, err := b.Store.GetAccount(ctx, tenant, account)
	if err != nil {
		return store.Breaker{}, fmt.Errorf("read account %s: %w", account, err)
	}
	for range 8 {
		br, err := b.Store.GetBreaker(ctx, tenant, account)
		if err != nil {
			return store.Breaker{}, err
		}
		if br.State == store.BreakerOpen {
			return br, nil
		}
		now := b.Clock.Now()
		from := br.State
		if from == "" {
			from = store.BreakerClosed
		}
		br.Tenant, br.Account = tenant, account
		br.Opens++
		br.State, br.Reason, br.OpenedAt, br.ProbeShard, br.UpdatedAt = store.BreakerOpen, reason, now, "", now
		br.Until = now.Add(Cooldown(acct.Breaker, br.Opens))
		br.Transition = &store.BreakerTransition{From: from, To: store.BreakerOpen, At: now, Reason: reason,
			FailureRate: cause.FailureRate, Attempts: cause.Attempts, ConsecutiveFailures: cause.ConsecutiveFailures,
			Opens: br.Opens, Until: br.Until}
		saved, err := b.Store.SaveBreaker(ctx, br)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return store.Breaker{}, fmt.Errorf("open breaker of %s: %w", account, err)
		}
		b.log().Warn("breaker opened", slog.String("account", account), slog.String("reason", reason),
			slog.Time("until", saved.Until), slog.Int("opens", saved.Opens))
		alert.Emit(ctx, b.Alerts, b.log(), alert.Event{Type: alert.BreakerOpened, Tenant: tenant, Time: now,
			Detail: alert.BreakerDetail{Account: account, Reason: reason, Until: saved.Until, Opens: saved.Opens}})
		return saved, nil
	}
	return store.Breaker{}, fmt.Errorf("open breaker of %s: %w", account, store.ErrConflict)
}

// ProbeResult ends a half-open probe: ok closes the breaker (BreakerClosed),
// a failed probe reopens it with a doubled cool-down.
func (b *Breakers) ProbeResult(ctx context.Context, tenant, account, shard string, ok bool) error {
	if !ok {
		_, err := b.Open(ctx, tenant, account, "probe failed")
		return err
	}
	for range 8 {
		br, err := b.Store.GetBreaker(ctx, tenant, account)
		if err != nil {
			return err
		}
		if br.State != store.BreakerHalfOpen || br.ProbeShard != shard {
			return nil // someone else decided meanwhile
		}
		now := b.Clock.Now()
		br.State, br.Opens, br.ProbeShard, br.Reason, br.UpdatedAt = store.BreakerClosed, 0, "", "probe succeeded", now
		br.Transition = &store.BreakerTransition{From: store.BreakerHalfOpen, To: store.BreakerClosed, At: now, Reason: "probe succeeded"}
		if _, err := b.Store.SaveBreaker(ctx, br); errors.Is(err, store.ErrConflict) {
			continue
		} else if err != nil {
			return fmt.Errorf("close breaker of %s: %w", account, err)
		}
		b.log().Info("breaker closed after a successful probe", slog.String("account", account))
		alert.Emit(ctx, b.Alerts, b.log(), alert.Event{Type: alert.BreakerClosed, Tenant: tenant, Time: now,
			Detail: alert.BreakerDetail{Account: account, Reason: "probe succeeded"}})
		return nil
	}
	return fmt.Errorf("close breaker of %s: %w", account, store.ErrConflict)
}

// ReleaseProbe gives up a half-open probe that had nothing to send: the
// breaker goes back to open with its cool-down over, so another shard of
// the account probes at once.
func (b *Breakers) ReleaseProbe(ctx context.Context, tenant, account, shard string) error {
	for range 8 {
		br, err := b.Store.GetBreaker(ctx, tenant, account)
		if err != nil {
			return err
		}
		if br.State != store.BreakerHalfOpen || br.ProbeShard != shard {
			return nil
		}
		now := b.Clock.Now()
		br.State, br.ProbeShard, br.Until, br.UpdatedAt = store.BreakerOpen, "", now, now
		br.Transition = &store.BreakerTransition{From: store.BreakerHalfOpen, To: store.BreakerOpen, At: now,
			Reason: "probe had nothing to send: another shard probes", Opens: br.Opens, Until: now}
		if _, err := b.Store.SaveBreaker(ctx, br); errors.Is(err, store.ErrConflict) {
			continue
		} else if err != nil {
			return fmt.Errorf("release probe of %s: %w", account, err)
		}
		return nil
	}
	return fmt.Errorf("release probe of %s: %w", account, store.ErrConflict)
}

// CheckReport says what a scheduled check did.
type CheckReport struct {
	Accounts int  // accounts with running shards
	Opened   int  // breakers opened for their failure rate
	Skipped  bool // another check holds the lease: nothing done
	// Missing counts accounts named by running shards that the store no
	// longer has (deleted while their jobs ran): not judged, logged, and
	// no reason to leave every other account unchecked.
	Missing int
}

// CheckLease is the store lease a check holds, so that checks never
// overlap: two at once would each measure a window of almost nothing.
const CheckLease = "breaker"

// checkLeaseFor bounds how long a check that dies keeps others out
// (longer than any check: the function's timeout is a minute).
const checkLeaseFor = 2 * time.Minute

type accountKey struct{ tenant, account string }

// Check is the scheduled evaluation: for every account with running shards,
// the failure rate of the attempts made since the previous check (a window
// of one schedule period); at or above the account's failure_rate, with at
// least min_samples attempts, the breaker opens.
func (b *Breakers) Check(ctx context.Context) (rep CheckReport, err error) {
	now := b.Clock.Now()
	rnd := make([]byte, 8)
	_, _ = rand.Read(rnd)
	holder := "breaker-" + hex.EncodeToString(rnd)
	_, err = b.Store.AcquireLease(ctx, store.AcquireLeaseParams{Name: CheckLease, Holder: holder, Now: now, Until: now.Add(checkLeaseFor)})
	if errors.Is(err, store.ErrConflict) {
		b.log().Info("another breaker check is running; skipping")
		return CheckReport{Skipped: true}, nil
	}
	if err != nil {
		return rep, fmt.Errorf("acquire the breaker check lease: %w", err)
	}
	defer func() {
		// Release even when ctx is done: the next check need not wait.
		if errRelease := b.Store.ReleaseLease(context.WithoutCancel(ctx), store.ReleaseLeaseParams{Name: CheckLease, Holder: holder}); errRelease != nil {
			err = errors.Join(err, fmt.Errorf("release the breaker check lease: %w", errRelease))
		}
	}()
	return b.check(ctx, now)
}

func (b *Breakers) check(ctx context.Context, now time.Time) (CheckReport, error) {
	var rep CheckReport
	refs, err := b.Store.ListStaleShards(ctx, store.ListStaleShardsParams{Before: now.Add(24 * time.Hour), Limit: 100000})
	if err != nil {
		return rep, fmt.Errorf("list running shards: %w", err)
	}
	type totals struct{ attempts, failures int64 }
	per := map[accountKey]*totals{}
	tenants := map[string]string{}
	for _, ref := range refs {
		tenant, ok := tenants[ref.JobID]
		if !ok {
			v, err := b.Store.GetJob(ctx, ref.JobID)
			if err != nil {
				return rep, fmt.Errorf("read job %s: %w", ref.JobID, err)
			}
			tenant = v.Job.Tenant
			tenants[ref.JobID] = tenant
		}
		sh, err := b.Store.GetShard(ctx, ref.JobID, ref.Index)
		if err != nil {
			return rep, fmt.Errorf("read shard %s/%d: %w", ref.JobID, ref.Index, err)
		}
		k := accountKey{tenant, sh.Account}
		if per[k] == nil {
			per[k] = &totals{}
		}
		per[k].attempts += sh.Attempts
		per[k].failures += sh.AttemptFailures
	}
	rep.Accounts = len(per)
	for k, t := range per {
		acct, err := b.Store.GetAccount(ctx, k.tenant, k.account)
		if errors.Is(err, store.ErrNotFound) {
			rep.Missing++
			b.log().Warn("breaker check: running shards name a missing account; not judged",
				slog.String("tenant", k.tenant), slog.String("account", k.account))
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("read account %s: %w", k.account, err)
		}
		br, err := b.Store.GetBreaker(ctx, k.tenant, k.account)
		if err != nil {
			return rep, err
		}
		dA, dF := t.attempts-br.WindowAttempts, t.failures-br.WindowFailures
		cfg := acct.Breaker
		if !br.WindowAt.IsZero() && dA > 0 && dF >= 0 && cfg.FailureRate > 0 &&
			dA >= int64(max(cfg.MinSamples, 1)) && float64(dF)/float64(dA) >= cfg.FailureRate &&
			(br.State == "" || br.State == store.BreakerClosed) {
			rate := float64(dF) / float64(dA)
			reason := fmt.Sprintf("failure rate %.0f%% over %d attempts in %s", 100*rate, dA, now.Sub(br.WindowAt).Round(time.Second))
			if _, err := b.OpenFor(ctx, k.tenant, k.account, Cause{Reason: reason, FailureRate: rate, Attempts: dA}); err != nil {
				return rep, err
			}
			rep.Opened++
			if br, err = b.Store.GetBreaker(ctx, k.tenant, k.account); err != nil {
				return rep, err
			}
		}
		br.Tenant, br.Account = k.tenant, k.account
		br.WindowAt, br.WindowAttempts, br.WindowFailures = now, t.attempts, t.failures
		if _, err := b.Store.SaveBreaker(ctx, br); err != nil && !errors.Is(err, store.ErrConflict) {
			return rep, fmt.Errorf("save breaker window of %s: %w", k.account, err)
		}
	}
	return rep, nil
}
