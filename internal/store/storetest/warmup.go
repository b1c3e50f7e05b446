package storetest

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/qunfa/qunfa/internal/store"
)

func takeWarm(t tb, s store.Store, bucket string, want int, rate, burst, warmup float64, now time.Time) store.TakeTokensResult {
	t.Helper()
	res, err := s.TakeTokens(ctxOf(t), store.TakeTokensParams{
		Bucket: bucket, Want: want, RatePerSec: rate, Burst: burst, Now: now, WarmupSec: warmup,
	})
	if err != nil {
		t.Fatalf("TakeTokens(%s, want %d at +%v, warm-up %vs): %v", bucket, want, now.Sub(Epoch), warmup, err)
	}
	if res.Granted < 0 || res.Granted > want {
		t.Fatalf("TakeTokens(%s, want %d) granted %d", bucket, want, res.Granted)
	}
	if res.Granted < want && res.RetryAfter <= 0 {
		t.Fatalf("TakeTokens(%s, want %d at +%v) granted %d with RetryAfter %v, want > 0", bucket, want, now.Sub(Epoch), res.Granted, res.RetryAfter)
	}
	return res
}

// rampArea is the integral over [0, u] seconds of the warm-up share of the
// rate: 10% rising linearly to 100% over s seconds, then 100%.
func rampArea(u, s float64) float64 {
	if u >= s {
		return 0.55*s + (u - s)
	}
	return 0.1*u + 0.45*u*u/s
}

// warmBound is the most a bucket warming since its first use may grant over
// elapsed: a tenth of its burst (at least one token), then the ramped rate.
func warmBound(rate, burst, warmup float64, elapsed time.Duration) int64 {
	return int64(math.Floor(math.Max(1, burst/10) + rate*rampArea(elapsed.Seconds(), warmup) + 1e-9))
}

func testTakeTokensWarmup(t *testing.T, s store.Store, _ Capabilities) {
	const rate, burst, warmup = 100.0, 100.0, 10.0
	t0 := at(time.Minute)
	var total int64
	greedy := func(from, to, step time.Duration) (granted int64) {
		for d := from; d <= to; d += step {
			g := int64(takeWarm(t, s, "warm", 1000, rate, burst, warmup, t0.Add(d)).Granted)
			granted += g
			total += g
			if bound := warmBound(rate, burst, warmup, d); total > bound {
				t.Fatalf("granted %d tokens by +%v warming over %vs at %v/s: more than %d", total, d, warmup, rate, bound)
			}
		}
		return granted
	}
	// An unused bucket starts warm: in the first 2 s at most 40% of the
	// full rate's 200 tokens (the ramp gives 10 + 38), and at least its
	// floor of 10%.
	if g := greedy(0, 2*time.Second, 10*time.Millisecond); g > 80 || g < 20 {
		t.Fatalf("first 2 s of warm-up granted %d, want 20..80 (10%%..40%% of 200)", g)
	}
	greedy(2*time.Second+100*time.Millisecond, 11*time.Second, 100*time.Millisecond)
	// After the warm-up period the bucket runs at full rate.
	if g := greedy(11*time.Second+100*time.Millisecond, 12*time.Second, 100*time.Millisecond); g < 99 || g > 100 {
		t.Fatalf("second 11..12 after the start granted %d, want 100 (full rate)", g)
	}
	// Takes keep coming (gaps under warmup_sec): no restart, full burst.
	for d := 17 * time.Second; d <= 35*time.Second; d += 6 * time.Second {
		if g := takeWarm(t, s, "warm", 1000, rate, burst, warmup, t0.Add(d)).Granted; g != 100 {
			t.Fatalf("a take 6 s after the last one (warm-up %vs) granted %d, want the full burst of 100", warmup, g)
		}
	}
	// An idle spell of warmup_sec restarts the warm-up: a tenth of the burst,
	// then a tenth of the rate, and RetryAfter counts on that rate.
	t1 := t0.Add(45 * time.Second)
	if g := takeWarm(t, s, "warm", 1000, rate, burst, warmup, t1).Granted; g != 10 {
		t.Fatalf("after 10 s idle granted %d, want 10 (10%% of the burst)", g)
	}
	res := takeWarm(t, s, "warm", 1000, rate, burst, warmup, t1.Add(20*time.Millisecond))
	if res.Granted != 0 || res.RetryAfter > 100*time.Millisecond || res.RetryAfter < 50*time.Millisecond {
		t.Fatalf("20 ms into a restarted warm-up: granted %d, RetryAfter %v; want 0, about 80 ms (10/s)", res.Granted, res.RetryAfter)
	}
	after := t1.Add(20*time.Millisecond + ceilMillis(res.RetryAfter))
	if g := takeWarm(t, s, "warm", 1000, rate, burst, warmup, after).Granted; g != 1 {
		t.Fatalf("waited RetryAfter %v and got %d tokens, want 1", res.RetryAfter, g)
	}

	// A bucket used without warm-up and then with it is warm unless idle.
	if g := take(t, s, "plain", 100, rate, burst, t0).Granted; g != 100 {
		t.Fatalf("plain bucket granted %d, want 100", g)
	}
	if g := takeWarm(t, s, "plain", 1000, rate, burst, warmup, t0.Add(5*time.Second)).Granted; g != 100 {
		t.Fatalf("a used bucket taking warm-up 5 s later granted %d, want 100", g)
	}
}

func testTakeTokensWarmupProperty(t *testing.T, s store.Store, caps Capabilities) {
	checkProperty(t, caps.sizes().propertyChecks, func(rt *rapid.T) {
		bucket := uniqueID("warm")
		rate := rapid.Float64Range(5, 200).Draw(rt, "rate")
		burst := float64(rapid.IntRange(1, 100).Draw(rt, "burst"))
		warmup := float64(rapid.IntRange(3, 20).Draw(rt, "warmup_sec"))
		steps := rapid.IntRange(1, 30).Draw(rt, "steps")
		now := Epoch
		var granted int64
		do := func(want int) store.TakeTokensResult {
			res := takeWarm(rt, s, bucket, want, rate, burst, warmup, now)
			granted += int64(res.Granted)
			// Gaps stay under warmup_sec: one warm period from the first take.
			if bound := warmBound(rate, burst, warmup, now.Sub(Epoch)); granted > bound {
				rt.Fatalf("granted %d tokens in %v warming over %vs at %.3f/s, burst %v: more than %d", granted, now.Sub(Epoch), warmup, rate, burst, bound)
			}
			if res.Granted < want {
				if next := ceilMillis(time.Duration(float64(time.Second)/rate*10)) + time.Millisecond; res.RetryAfter > next {
					rt.Fatalf("RetryAfter %v, but even at 10%% of the rate a token comes every %v", res.RetryAfter, next)
				}
			}
			return res
		}
		for range steps {
			now = now.Add(time.Duration(rapid.IntRange(0, 2000).Draw(rt, "advance_ms")) * time.Millisecond)
			want := rapid.IntRange(1, 30).Draw(rt, "want")
			res := do(want)
			if res.Granted < want && rapid.Bool().Draw(rt, "wait") {
				now = now.Add(ceilMillis(res.RetryAfter))
				if again := do(1); again.Granted != 1 {
					rt.Fatalf("waited RetryAfter %v and got no token", res.RetryAfter)
				}
			}
		}
	})
}
