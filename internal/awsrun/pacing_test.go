package awsrun_test

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// TestRandomPacingOnAWSAdapters (issue 20): the sender function, built as
// in Lambda, on DynamoDB (dynalite) and SQS FIFO (the emulator), sends a
// minute's worth for an account at 10/s with pacing random and min_gap_ms
// 30. Judged by the mock's log: every recipient once, the average rate
// within 5 % of 10/s, no two sends closer than 30 ms, at most two in any
// 100 ms, and gaps that vary (coefficient of variation above 0.5).
func TestRandomPacingOnAWSAdapters(t *testing.T) {
	if testing.Short() {
		t.Skip("sends for a minute")
	}
	awsEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSenderStack(t, ctx, "paced")
	const (
		id     = "paced-aws"
		rate   = 10.0
		minGap = 30 * time.Millisecond
		n      = 601 // a minute at 10/s
	)
	s.account(ctx, store.Account{ID: id, RatePerSec: rate, Burst: rate, MaxRecipientsPerCall: 1,
		Pacing: store.Pacing{Mode: store.PacingRandom, MinGapMs: int(minGap.Milliseconds())}})
	job := s.submit(ctx, "paced", recipients(id, n))
	final := s.sendUntilFinal(ctx, job.ID, 200*time.Millisecond)
	if final.Job.Status != store.JobCompleted || final.Counts().Confirmed != n {
		t.Fatalf("job %s counts %+v, want completed with %d confirmed", final.Job.Status, final.Counts(), n)
	}

	var ts []time.Time
	keys := map[string]int{}
	for _, d := range s.deliveries() {
		keys[d.Key]++
		ts = append(ts, d.TS)
	}
	if len(keys) != n || len(ts) != n {
		t.Fatalf("%d deliveries of %d keys, want %d once each", len(ts), len(keys), n)
	}
	judgePacing(t, ts, rate, minGap)
}

// judgePacing applies the four criteria of issue 20 to an account's send
// times as the provider logged them.
func judgePacing(t *testing.T, ts []time.Time, rate float64, minGap time.Duration) {
	t.Helper()
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	window := time.Duration(float64(time.Second) / rate)
	closest, most, j := time.Hour, 0, 0
	var gaps []float64
	for i := range ts {
		if i > 0 {
			closest = min(closest, ts[i].Sub(ts[i-1]))
			gaps = append(gaps, ts[i].Sub(ts[i-1]).Seconds())
		}
		for ts[i].Sub(ts[j]) >= window {
			j++
		}
		most = max(most, i-j+1)
	}
	span := ts[len(ts)-1].Sub(ts[0]).Seconds()
	got, mean := float64(len(gaps))/span, span/float64(len(gaps))
	var sq float64
	for _, g := range gaps {
		sq += (g - mean) * (g - mean)
	}
	cv := math.Sqrt(sq/float64(len(gaps))) / mean
	t.Logf("%d sends: %.3f/s, closest %v, at most %d in %v, cv %.3f", len(ts), got, closest, most, window, cv)
	if math.Abs(got-rate) > 0.05*rate {
		t.Errorf("average rate %.3f/s, not within 5%% of %v/s", got, rate)
	}
	if closest < minGap {
		t.Errorf("two sends %v apart, closer than min_gap_ms %v", closest, minGap)
	}
	if most > 2 {
		t.Errorf("%d sends within 1/rate: a burst", most)
	}
	if cv <= 0.5 {
		t.Errorf("gaps' coefficient of variation %.3f, not above 0.5", cv)
	}
}
