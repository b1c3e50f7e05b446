package sender

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/store"
)

// TestBatchWaitWaitsForABatchsTokens: an empty bucket is waited for as
// many tokens as the batch wants, but no more than half the sender's
// bucket (half the account's burst: the bucket given is that), what
// MaxWait brings in at the rate, or what the shard has left pending;
// beyond the next token, which the bucket's own RetryAfter covers.
func TestBatchWaitWaitsForABatchsTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		want        int
		rate, burst float64
		maxWait     time.Duration
		pending     int64
		wait        time.Duration
	}{
		{"the batch", 10, 1, 40, 30 * time.Second, 100, 9 * time.Second},
		{"half the bucket", 50, 1, 20, 30 * time.Second, 100, 9 * time.Second},
		{"what MaxWait brings in", 50, 2, 100, 5 * time.Second, 100, 4500 * time.Millisecond},
		{"the last items", 10, 1, 40, 30 * time.Second, 3, 2 * time.Second},
		{"one token", 1, 1, 40, 30 * time.Second, 100, 0},
		{"less than a token in MaxWait", 10, 1, 40, 500 * time.Millisecond, 100, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &turn{cfg: Config{MaxWait: tc.maxWait}, shard: store.Shard{Counts: store.Counts{Pending: tc.pending}}}
			if got := tr.batchWait(tc.want, tc.rate, tc.burst); got != tc.wait {
				t.Errorf("batchWait(want %d, rate %g, bucket %g), MaxWait %v, %d pending = %v, want %v",
					tc.want, tc.rate, tc.burst, tc.maxWait, tc.pending, got, tc.wait)
			}
		})
	}
}

// TestSpacingOnlyForSingleTokenBuckets: an account whose sender bucket
// holds one token (a burst under 4) sends again only 1/rate after the last
// answer (at the job's rate when that is lower, at the bulk rate, the
// account's less its online reserve); an account with a burst to spare is
// not spaced, nor the first send of a turn.
func TestSpacingOnlyForSingleTokenBuckets(t *testing.T) {
	t.Parallel()
	now := outcomesT0
	for _, tc := range []struct {
		name     string
		account  store.Account
		jobRate  float64
		answered time.Duration // before now; 0: nothing answered yet
		spacing  time.Duration
	}{
		{"burst 2", store.Account{RatePerSec: 2, Burst: 2}, 0, 200 * time.Millisecond, 300 * time.Millisecond},
		{"burst 3, bulk rate", store.Account{RatePerSec: 3, Burst: 3, OnlineReservePerSec: 1}, 0, 100 * time.Millisecond, 400 * time.Millisecond},
		{"job rate lower", store.Account{RatePerSec: 10, Burst: 1}, 1, 0, 0},
		{"job rate lower, answered", store.Account{RatePerSec: 10, Burst: 1}, 1, 250 * time.Millisecond, 750 * time.Millisecond},
		{"burst 4", store.Account{RatePerSec: 10, Burst: 4}, 0, 10 * time.Millisecond, 0},
		{"burst 20", store.Account{RatePerSec: 2, Burst: 20}, 0, 10 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &turn{account: tc.account, job: store.Job{RatePerSec: tc.jobRate}}
			if tc.answered > 0 {
				tr.lastAnswerAt = now.Add(-tc.answered)
			}
			if got := tr.spacing(now); got != tc.spacing {
				t.Errorf("spacing of %+v (job rate %g) answered %v ago = %v, want %v", tc.account, tc.jobRate, tc.answered, got, tc.spacing)
			}
		})
	}
}

// TestPaceSlowsAShardToItsSlowFactor: after a batch of n items a shard
// slowed to factor f waits as long as n items take at f of the rate beyond
// what they take at the full rate (the account's bulk rate, or the job's
// when lower), in the handler when that is within MaxWait; a shard at full
// speed, or a batch that sent nothing, does not wait.
func TestPaceSlowsAShardToItsSlowFactor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		slow    float64
		jobRate float64
		n       int
		wait    time.Duration
	}{
		{"half speed", 0.5, 0, 5, 500 * time.Millisecond},
		{"a quarter", 0.25, 0, 2, 600 * time.Millisecond},
		{"the job's rate", 0.5, 4, 5, 1250 * time.Millisecond},
		{"exactly MaxWait", 0.5, 0, 20, 2 * time.Second},
		{"full speed", 1, 0, 5, 0},
		{"nothing sent", 0.5, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(outcomesT0)
			tr := &turn{s: &Sender{Clock: clk}, cfg: Config{MaxWait: 2 * time.Second}, slow: tc.slow,
				account: store.Account{RatePerSec: 12, OnlineReservePerSec: 2}, job: store.Job{RatePerSec: tc.jobRate}}
			res, stop, err := tr.pace(context.Background(), tc.n)
			if err != nil || stop || res != (Result{}) {
				t.Fatalf("pace = %+v, stop %v, %v; want to go on", res, stop, err)
			}
			if waited := clk.Now().Sub(outcomesT0); waited != tc.wait {
				t.Errorf("waited %v after %d items at slow factor %g (bulk rate 10, job rate %g), want %v", waited, tc.n, tc.slow, tc.jobRate, tc.wait)
			}
		})
	}
}
