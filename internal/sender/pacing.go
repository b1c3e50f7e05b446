package sender

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// takeTokens takes up to want tokens from the account bucket (and the job's,
// when the job caps its rate). It returns how long until more when none.
//
// Buckets always refill at their configured rate, whoever takes from them;
// a shard's slow-down is applied as pacing after its batches (see pace).
// The sender's bucket holds at most half the account's burst: requests
// granted together can reach the provider closer together than they were
// granted (connection set-up, scheduling), and the other half absorbs that
// jitter so the provider's own bucket never overflows.
//
// When the bucket is empty the wait is for a batch, not a token: as many
// tokens as a batch wants, up to half the sender's bucket and to what
// MaxWait brings in. A slow account then sends a batch every few hundred
// milliseconds instead of one item at every token, so the store writes per
// message stay low at any rate. The rate is the same: the bucket is only
// half full when we come back, so a late wake-up loses no tokens.
func (tr *turn) takeTokens(ctx context.Context, want int, now time.Time) (int, time.Duration, error) {
	rate := tr.account.BatchRate()
	if rate <= 0 {
		return 0, time.Second, nil
	}
	burst := tr.account.Burst
	if burst <= 0 {
		burst = rate
	}
	burst = math.Max(1, math.Floor(burst/2))
	if tr.job.RatePerSec > 0 {
		jb := math.Max(1, math.Min(burst, math.Floor(tr.job.RatePerSec/2)))
		res, err := tr.s.Store.TakeTokens(ctx, store.TakeTokensParams{
			Bucket: "job:" + tr.job.ID, Want: want, RatePerSec: tr.job.RatePerSec, Burst: jb, Now: now,
		})
		if err != nil {
			return 0, 0, fmt.Errorf("take job tokens: %w", err)
		}
		if res.Granted == 0 {
			return 0, res.RetryAfter + tr.batchWait(want, tr.job.RatePerSec, jb), nil
		}
		want = res.Granted
	}
	// One bucket per provider account, whichever tenant's job sends (an
	// account has one owner, but the provider counts the guid's sends).
	res, err := tr.s.Store.TakeTokens(ctx, store.TakeTokensParams{
		Bucket: AccountBucket(tr.shard.Account), Want: want,
		RatePerSec: rate, Burst: burst, Now: now, WarmupSec: float64(tr.account.WarmupSec),
	})
	if err != nil {
		return 0, 0, fmt.Errorf("take account tokens: %w", err)
	}
	if res.Granted == 0 {
		return 0, res.RetryAfter + tr.batchWait(want, rate, burst), nil
	}
	return res.Granted, res.RetryAfter, nil
}

// spacing is how long to wait before the next send of an account whose
// bucket holds a single token (a burst under 4). A token bucket spaces its
// grants, but a send can start later than its grant (a busy machine, a slow
// store write, a new connection) and arrive right before the next one:
// with no burst to spare the provider would see two sends closer than
// 1/rate. So such an account's next send also waits 1/rate from the
// previous answer, which came after the previous send arrived.
func (tr *turn) spacing(now time.Time) time.Duration {
	if tr.lastAnswerAt.IsZero() {
		return 0
	}
	rate := tr.account.BatchRate()
	if tr.job.RatePerSec > 0 {
		rate = math.Min(rate, tr.job.RatePerSec)
	}
	burst := tr.account.Burst
	if burst <= 0 {
		burst = rate
	}
	if rate <= 0 || math.Floor(burst/2) > 1 {
		return 0
	}
	return tr.lastAnswerAt.Add(time.Duration(float64(time.Second) / rate)).Sub(now)
}

// spacingLead is how much earlier than the gap a spaced turn wakes up to
// take its token and claim, before waiting out the rest right before the
// call.
const spacingLead = 100 * time.Millisecond

// AccountBucket names the token bucket of a provider account.
func AccountBucket(account string) string { return "acct:" + account }

// batchWait is how much longer than for its next token an empty bucket of
// rate and burst is waited for, so that a batch of want finds its tokens.
func (tr *turn) batchWait(want int, rate, burst float64) time.Duration {
	target := math.Min(float64(want), math.Min(math.Floor(burst/2), math.Floor(rate*tr.cfg.MaxWait.Seconds())))
	if p := tr.shard.Counts.Pending; p > 0 {
		target = math.Min(target, float64(p)) // the last batch waits for what it needs
	}
	if target <= 1 {
		return 0
	}
	return time.Duration((target - 1) / rate * float64(time.Second))
}

// pace slows a shard that was told to slow down: after a batch of n items
// it waits as long as sending n at the slowed rate takes beyond sending
// them at the full rate, leaving the tokens to the account's other shards.
func (tr *turn) pace(ctx context.Context, n int) (Result, bool, error) {
	rate := tr.account.BatchRate()
	if tr.job.RatePerSec > 0 {
		rate = math.Min(rate, tr.job.RatePerSec)
	}
	if tr.slow >= 1 || rate <= 0 || n == 0 {
		return Result{}, false, nil
	}
	extra := time.Duration(float64(n) / rate * (1/tr.slow - 1) * float64(time.Second))
	return tr.wait(ctx, extra, "slowed down after rate limiting")
}

// wait waits d in the handler when short, else hands the shard back.
func (tr *turn) wait(ctx context.Context, d time.Duration, why string) (Result, bool, error) {
	tr.returnSlots() // never hold the account's call slots while waiting
	wctx := context.WithoutCancel(ctx)
	if d <= tr.cfg.MaxWait {
		if err := tr.s.Clock.Sleep(ctx, d); err != nil {
			res, err := tr.continueLater(wctx, "shutting down")
			return res, true, err
		}
		return Result{}, false, nil
	}
	res, err := tr.handBack(wctx, d, why)
	return res, true, err
}

// nothingDue decides what to do when a claim found nothing.
func (tr *turn) nothingDue(ctx context.Context, nextDue, now time.Time) (Result, bool, error) {
	// Calls still running hold submitted items: record them first, so the
	// counts below say what is really left.
	if err := tr.collectStragglers(context.WithoutCancel(ctx), true); err != nil {
		return Result{}, true, err
	}
	if tr.probe {
		// Nothing to probe with here: let another shard of the account probe.
		if err := tr.s.Breakers.ReleaseProbe(context.WithoutCancel(ctx), tr.job.Tenant, tr.shard.Account, tr.shardName()); err != nil {
			return Result{}, true, err
		}
		tr.probe = false
	}
	counts := tr.shard.Counts
	switch {
	case !nextDue.IsZero():
		return tr.wait(ctx, nextDue.Sub(now), "waiting for backoff")
	case counts.Pending > 0 || counts.Impossible(tr.shard.Size):
		// Counts say pending but nothing is claimable, or they cannot be
		// true (negative, or not adding up to the shard's size): a turn
		// never ends "waiting for reconciliation" on such counts.
		// Make them true from the items and look again.
		sh, err := tr.s.Store.RecountShard(context.WithoutCancel(ctx), tr.t.JobID, tr.t.Shard)
		if err != nil {
			return Result{}, true, fmt.Errorf("recount shard: %w", err)
		}
		tr.log.Warn("shard counts were off; recounted", slog.Int64("pending_was", counts.Pending), slog.Int64("pending", sh.Counts.Pending))
		tr.adoptRecount(sh)
		if sh.Counts.Pending > 0 {
			res, err := tr.handBack(context.WithoutCancel(ctx), time.Second, "pending items not claimable")
			return res, true, err
		}
		return Result{}, false, nil
	case counts.Submitted > 0:
		// Items await reconciliation; the reconciler re-drives the shard.
		res, err := tr.end(context.WithoutCancel(ctx), "waiting for reconciliation of submitted items")
		return res, true, err
	default:
		res, err := tr.finishShard(context.WithoutCancel(ctx))
		return res, true, err
	}
}

// slotHorizon is how far ahead a paced account's turn takes its slots
// (issue 20), at most MaxWait: the claim and the store work of a batch
// happen while its calls wait for their slots, so none goes out late for
// them, and a turn that ends waits at most that long for its last call.
func (tr *turn) slotHorizon() time.Duration { return min(time.Second, tr.cfg.MaxWait) }

// itemsPerCall is how many items one call of a batch carries at most:
// the batch size (callSize) when the template has no variables (every
// item then renders the same text), else one. n items then make at most
// ⌈n/itemsPerCall⌉ calls (callsFor).
func (tr *turn) itemsPerCall() int {
	if tr.packed() {
		return tr.callSize()
	}
	return 1
}

// takeSlots takes send slots for up to want items from the paced
// account's random schedule, one slot per call (a multi-recipient call is
// one send), and from the job's bucket when the job caps its rate. It
// returns how many items the slots carry, or how long to wait when none
// was granted: until the next slot comes within the horizon, plus up to
// half of MaxWait so that the next take finds several slots at once.
//
// Job tokens taken while the account's next slot is still away are held by
// the turn for its next take, so a job cap never wastes the account's
// slots nor the job's tokens.
func (tr *turn) takeSlots(ctx context.Context, want int, now time.Time) (int, time.Duration, error) {
	rate := tr.account.BatchRate()
	if rate <= 0 {
		return 0, time.Second, nil
	}
	if p := tr.shard.Counts.Pending; p > 0 {
		want = min(want, int(p)) // no slot for items that are not there
	}
	per := tr.itemsPerCall()
	calls := (want + per - 1) / per
	if tr.job.RatePerSec > 0 {
		if tr.jobTokens < calls {
			jb := math.Max(1, math.Floor(tr.job.RatePerSec/2))
			res, err := tr.s.Store.TakeTokens(ctx, store.TakeTokensParams{
				Bucket: "job:" + tr.job.ID, Want: calls - tr.jobTokens, RatePerSec: tr.job.RatePerSec, Burst: jb, Now: now,
			})
			if err != nil {
				return 0, 0, fmt.Errorf("take job tokens: %w", err)
			}
			tr.jobTokens += res.Granted
			if tr.jobTokens == 0 {
				return 0, res.RetryAfter, nil
			}
		}
		calls = min(calls, tr.jobTokens)
	}
	res, err := tr.s.Store.TakeSlots(ctx, store.TakeSlotsParams{
		Bucket: AccountBucket(tr.shard.Account), Want: calls, RatePerSec: rate,
		MinGap: time.Duration(tr.account.Pacing.MinGapMs) * time.Millisecond, WarmupSec: float64(tr.account.WarmupSec),
		Now: now, Horizon: tr.slotHorizon(), Rand: tr.s.rand,
	})
	if err != nil {
		return 0, 0, fmt.Errorf("take account slots: %w", err)
	}
	if len(res.Slots) == 0 {
		return 0, res.RetryAfter + tr.slotHorizon()/2, nil
	}
	if tr.job.RatePerSec > 0 {
		tr.jobTokens -= len(res.Slots)
	}
	tr.slots = res.Slots
	return min(want, len(res.Slots)*per), 0, nil
}

// untilLastSlot waits until the last slot taken has come, so that the
// calls waiting for their slots have gone out (with a fake clock, this
// is what moves time to them).
func (tr *turn) untilLastSlot(ctx context.Context) {
	if d := tr.lastSlot.Sub(tr.s.Clock.Now()); d > 0 {
		_ = tr.s.Clock.Sleep(context.WithoutCancel(ctx), d)
	}
}
