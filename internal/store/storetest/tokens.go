package storetest

import (
	"math"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/qunfa/qunfa/internal/store"
)

// checkProperty runs prop under rapid, but against the store at most limit
// times: rapid's number of cases is one process-wide flag, and a store case
// costs real writes. Cases beyond the limit pass without touching the store.
// Once a case has failed, every later run (rapid's reproduction and
// shrinking) runs in full.
func checkProperty(t *testing.T, limit int, prop func(*rapid.T)) {
	t.Helper()
	ran, failing := 0, false
	rapid.Check(t, func(rt *rapid.T) {
		if ran >= limit && !failing {
			return
		}
		ran++
		done := false
		defer func() {
			if !done || rt.Failed() {
				failing = true
			}
		}()
		prop(rt)
		done = true
	})
}

// ceilMillis rounds d up to a whole millisecond: a backend may keep
// bucket times to the millisecond.
func ceilMillis(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// tokenBound is the most a bucket may grant over elapsed since its first
// use.
func tokenBound(rate, burst float64, elapsed time.Duration) int64 {
	return int64(math.Floor(burst + rate*elapsed.Seconds() + 1e-9))
}

func take(t tb, s store.Store, bucket string, want int, rate, burst float64, now time.Time) store.TakeTokensResult {
	t.Helper()
	res, err := s.TakeTokens(ctxOf(t), store.TakeTokensParams{Bucket: bucket, Want: want, RatePerSec: rate, Burst: burst, Now: now})
	if err != nil {
		t.Fatalf("TakeTokens(%s, want %d at +%v): %v", bucket, want, now.Sub(Epoch), err)
	}
	if res.Granted < 0 || res.Granted > want {
		t.Fatalf("TakeTokens(%s, want %d) granted %d", bucket, want, res.Granted)
	}
	if res.Granted < want && res.RetryAfter <= 0 {
		t.Fatalf("TakeTokens(%s, want %d at +%v) granted %d with RetryAfter %v, want > 0", bucket, want, now.Sub(Epoch), res.Granted, res.RetryAfter)
	}
	return res
}

func testTakeTokens(t *testing.T, s store.Store, _ Capabilities) {
	const rate, burst = 5.0, 10.0 // one token every 200 ms
	t0 := at(time.Minute)
	expect := func(bucket string, want int, now time.Time, granted int) store.TakeTokensResult {
		t.Helper()
		res := take(t, s, bucket, want, rate, burst, now)
		if res.Granted != granted {
			t.Fatalf("TakeTokens(%s, want %d at +%v) granted %d, want %d", bucket, want, now.Sub(t0), res.Granted, granted)
		}
		return res
	}
	// A new bucket is full; asking for more than it holds takes what it has.
	expect("b1", 15, t0, 10)
	res := expect("b1", 1, t0, 0)
	if res.RetryAfter > 200*time.Millisecond+time.Millisecond {
		t.Fatalf("RetryAfter %v on an empty bucket refilling every 200ms", res.RetryAfter)
	}
	expect("b1", 3, t0.Add(200*time.Millisecond), 1)
	expect("b1", 1, t0.Add(300*time.Millisecond), 0)
	// Refill stops at Burst.
	expect("b1", 25, t0.Add(time.Hour), 10)
	// Time seen going backwards (another sender's clock) refills nothing
	// and does not let the next call count the same interval twice.
	expect("b1", 5, t0.Add(30*time.Minute), 0)
	res = take(t, s, "b1", 10, rate, burst, t0.Add(time.Hour+400*time.Millisecond))
	if res.Granted < 1 || res.Granted > 2 {
		t.Fatalf("400ms after draining (with a call from the past between) granted %d, want 2", res.Granted)
	}

	// Buckets are independent, and full at first use whenever that is.
	expect("b2", 4, t0, 4)
	expect("b3", 10, t0.Add(2*time.Hour), 10)
	expect("b2", 6, t0, 6)
	expect("b2", 1, t0, 0)
}

func testTakeTokensRateChange(t *testing.T, s store.Store, _ Capabilities) {
	t0 := at(time.Minute)
	// Raised rate: from the call that carries it on, refill is at the new rate.
	if g := take(t, s, "up", 10, 1, 10, t0).Granted; g != 10 {
		t.Fatalf("full bucket granted %d, want 10", g)
	}
	if g := take(t, s, "up", 10, 100, 10, t0.Add(time.Second)).Granted; g < 1 || g > 10 {
		t.Fatalf("after the raise granted %d, want 1..10", g)
	}
	if g := take(t, s, "up", 10, 100, 10, t0.Add(time.Second+50*time.Millisecond)).Granted; g < 4 || g > 5 {
		t.Fatalf("50ms at 100/s granted %d, want 5", g)
	}

	// Lowered rate and burst take effect at once.
	if g := take(t, s, "down", 100, 100, 100, t0).Granted; g != 100 {
		t.Fatalf("full bucket granted %d, want 100", g)
	}
	if g := take(t, s, "down", 10, 1, 1, t0.Add(time.Second)).Granted; g != 1 {
		t.Fatalf("after lowering to 1/s, burst 1, granted %d, want 1", g)
	}
	res := take(t, s, "down", 10, 1, 1, t0.Add(1500*time.Millisecond))
	if res.Granted != 0 || res.RetryAfter > 500*time.Millisecond+time.Millisecond {
		t.Fatalf("half a token at 1/s: granted %d, RetryAfter %v; want 0, ≤ 500ms", res.Granted, res.RetryAfter)
	}
	if g := take(t, s, "down", 10, 1, 1, t0.Add(2*time.Second)).Granted; g != 1 {
		t.Fatalf("a second at 1/s granted %d, want 1", g)
	}

	// A lowered burst caps the tokens already stored.
	if g := take(t, s, "burst", 1, 1, 10, t0).Granted; g != 1 {
		t.Fatalf("granted %d, want 1", g)
	}
	if g := take(t, s, "burst", 10, 1, 3, t0).Granted; g != 3 {
		t.Fatalf("9 stored tokens under a new burst of 3: granted %d, want 3", g)
	}
}

func testTakeTokensProperty(t *testing.T, s store.Store, caps Capabilities) {
	checkProperty(t, caps.sizes().propertyChecks, func(rt *rapid.T) {
		bucket := uniqueID("bucket")
		rate := rapid.Float64Range(0.5, 200).Draw(rt, "rate")
		burst := float64(rapid.IntRange(1, 40).Draw(rt, "burst"))
		steps := rapid.IntRange(1, 30).Draw(rt, "steps")
		now := Epoch
		var first time.Time
		var granted int64
		do := func(want int) store.TakeTokensResult {
			res := take(rt, s, bucket, want, rate, burst, now)
			if first.IsZero() {
				first = now
			}
			granted += int64(res.Granted)
			if bound := tokenBound(rate, burst, now.Sub(first)); granted > bound {
				rt.Fatalf("granted %d tokens in %v at %.3f/s, burst %v: more than %d", granted, now.Sub(first), rate, burst, bound)
			}
			if res.Granted < want {
				if next := ceilMillis(time.Duration(float64(time.Second)/rate)) + time.Millisecond; res.RetryAfter > next {
					rt.Fatalf("RetryAfter %v, but a token comes every %v", res.RetryAfter, next)
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

func testTakeTokensConcurrent(t *testing.T, s store.Store, caps Capabilities) {
	sz := caps.sizes()
	const rate, burst = 50.0, 20.0 // 5 tokens per 100 ms step
	var (
		mu      sync.Mutex
		granted int64
		wg      sync.WaitGroup
		errs    = make([]error, sz.workers)
	)
	last := Epoch
	for step := range sz.tokenSteps {
		now := Epoch.Add(time.Duration(step) * 100 * time.Millisecond)
		last = now
		for g := range sz.workers {
			wg.Go(func() {
				for range 2 {
					res, err := s.TakeTokens(ctxOf(t), store.TakeTokensParams{Bucket: "shared", Want: 1, RatePerSec: rate, Burst: burst, Now: now})
					if err != nil {
						errs[g] = err
						return
					}
					mu.Lock()
					granted += int64(res.Granted)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("step %d: TakeTokens: %v", step, err)
			}
		}
	}
	bound := tokenBound(rate, burst, last.Sub(Epoch))
	if granted > bound {
		t.Fatalf("%d goroutines granted %d tokens over %v at %v/s, burst %v: more than %d", sz.workers, granted, last.Sub(Epoch), rate, burst, bound)
	}
	// Demand always exceeded supply: everything available was granted
	// (one token of slack for floating-point refill).
	if granted < bound-1 {
		t.Fatalf("%d goroutines granted only %d of %d available tokens", sz.workers, granted, bound)
	}
}
