package sender_test

import (
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestRateHeldOnAFakeClock: an account's shards together never send faster
// than its batch rate (rate less online reserve) with the sender's half of
// its burst, nor a job faster than its rate cap with its own bucket (half
// the cap, at most the account's), and not much slower: the deliveries
// the provider saw, timed by the fake clock every part of the engine
// reads, fit the bucket in every window, and the whole run keeps at least
// 85% of the rate. The fake-clock counterpart of TestRatePerAccount
// (skipped with -short).
func TestRateHeldOnAFakeClock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                     string
		acctRate, acctBurst, res float64
		jobRate                  float64
		rate, burst              float64 // what the provider may see
	}{
		{name: "account", acctRate: 12, acctBurst: 8, res: 2, rate: 10, burst: 4},
		{name: "job cap", acctRate: 100, acctBurst: 100, jobRate: 5, rate: 5, burst: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			p := newPipeline(t, pipelineOptions{clock: clk, sender: sender.Config{ClaimBatch: 5}, responseTimeout: 200 * time.Millisecond, shardSplit: 40})
			p.account("a", tc.acctRate, tc.acctBurst, tc.res, 1)
			job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 80), RatePerSec: tc.jobRate}, "fake-rate")
			if len(job.Shards) != 2 {
				t.Fatalf("%d shards, want 2 sharing the account", len(job.Shards))
			}
			v := p.driveUntil(clk, final, job.Job.ID)
			if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 80 {
				t.Fatalf("%s %+v", v.Job.Status, v.Counts())
			}
			p.checkExactlyOnce(job.Job.ID)
			var ts []time.Time
			for _, ds := range p.deliveries() {
				ts = append(ts, ds[0].TS)
			}
			slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
			for i := range ts {
				for j := i + int(tc.burst); j < len(ts); j++ {
					n := float64(j - i + 1)
					if least := time.Duration((n - tc.burst) / tc.rate * float64(time.Second)); ts[j].Sub(ts[i]) < least-time.Millisecond {
						t.Fatalf("deliveries %d to %d (%v) within %v, want at least %v at %v/s with a burst of %v",
							i, j, n, ts[j].Sub(ts[i]), least, tc.rate, tc.burst)
					}
				}
			}
			span := ts[len(ts)-1].Sub(ts[0]).Seconds()
			if achieved := float64(len(ts)-int(tc.burst)) / span; achieved < 0.85*tc.rate {
				t.Errorf("%.1f/s over %.1fs, want at least 85%% of %v/s", achieved, span, tc.rate)
			}
		})
	}
}
