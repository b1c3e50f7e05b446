package store_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/qunfa/qunfa/internal/store"
)

var paceEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// schedule takes slots one at a time, as a punctual sender does: it comes
// back exactly when told and takes its slot as soon as it is granted.
func schedule(t *testing.T, p store.TakeSlotsParams, until time.Duration) []time.Time {
	t.Helper()
	var (
		st    store.PaceState
		fresh = true
		out   []time.Time
		now   = p.Now
	)
	for now.Sub(p.Now) < until {
		q := p
		q.Now = now
		res, next := store.TakeSlots(st, fresh, q)
		st, fresh = next, false
		if len(res.Slots) == 0 {
			if res.RetryAfter <= 0 {
				t.Fatalf("no slot and no retry at +%v", now.Sub(p.Now))
			}
			now = now.Add(res.RetryAfter)
			continue
		}
		for _, s := range res.Slots {
			if s.Before(now) {
				t.Fatalf("slot %v before the take at %v", s, now)
			}
		}
		out = append(out, res.Slots...)
		now = res.Slots[len(res.Slots)-1]
	}
	return out
}

// judge applies the acceptance criteria of issue 20 to one minute of send
// times seen at the provider: the average rate, the closest two sends, the
// most sends in any window of 1/rate, and the gaps' coefficient of
// variation.
func judge(times []time.Time) (rate float64, minGap time.Duration, maxInWindow int, cv float64) {
	gaps := make([]float64, 0, len(times))
	minGap = time.Hour
	for i := 1; i < len(times); i++ {
		g := times[i].Sub(times[i-1])
		minGap = min(minGap, g)
		gaps = append(gaps, g.Seconds())
	}
	rate = float64(len(times)-1) / times[len(times)-1].Sub(times[0]).Seconds()
	j := 0
	for i := range times {
		for times[i].Sub(times[j]) >= time.Duration(float64(time.Second)/10) {
			j++
		}
		maxInWindow = max(maxInWindow, i-j+1)
	}
	var sum, sq float64
	for _, g := range gaps {
		sum += g
	}
	mean := sum / float64(len(gaps))
	for _, g := range gaps {
		sq += (g - mean) * (g - mean)
	}
	return rate, minGap, maxInWindow, math.Sqrt(sq/float64(len(gaps))) / mean
}

// TestRandomPacingMeetsTheJudgeEveryMinute draws two hours of a 10/s
// account with min_gap_ms 30, adds up to 15 ms of delay to every send on
// its way to the provider, and judges every minute as the acceptance test
// does, with margins.
func TestRandomPacingMeetsTheJudgeEveryMinute(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 26))
	times := schedule(t, store.TakeSlotsParams{
		Bucket: "acct:a", Want: 1, RatePerSec: 10, MinGap: 30 * time.Millisecond, Now: paceEpoch, Rand: rng.Float64,
	}, 2*time.Hour)
	seen := make([]time.Time, len(times))
	for i, s := range times {
		seen[i] = s.Add(time.Duration(rng.Float64() * float64(15*time.Millisecond)))
	}
	for start := 0; start+600 < len(seen); start += 600 {
		minute := seen[start : start+601]
		rate, minGap, most, cv := judge(minute)
		if math.Abs(rate-10) > 0.25 || minGap < 30*time.Millisecond || most > 2 || cv < 0.55 {
			t.Fatalf("minute from send %d: rate %.3f/s, closest %v, %d sends in 100 ms, cv %.3f; want 10±0.25/s, ≥ 30 ms, ≤ 2, ≥ 0.55",
				start, rate, minGap, most, cv)
		}
	}
	r, mg, mw, c := judge(seen)
	t.Logf("two hours: %.4f/s, closest %v, most %d in 100 ms, cv %.3f, %d sends", r, mg, mw, c, len(seen))
	// Without the delays the promises hold with the jitter allowance to spare.
	_, minGap, _, _ := judge(times)
	if minGap < 50*time.Millisecond {
		t.Errorf("closest slots %v apart, want ≥ 50 ms (30 ms + the 20 ms allowance)", minGap)
	}
	for i := 2; i < len(times); i++ {
		if d := times[i].Sub(times[i-2]); d < 140*time.Millisecond {
			t.Fatalf("slots %d and %d %v apart, want ≥ 140 ms", i-2, i, d)
		}
	}
}

// TestRandomPacingFollowsRateChangesAndWarmup: the mean gap follows the
// rate passed at each take, and a warming account starts at a tenth.
func TestRandomPacingFollowsRateChangesAndWarmup(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := store.TakeSlotsParams{Bucket: "acct:a", Want: 1, RatePerSec: 2, Now: paceEpoch, Rand: rng.Float64}
	var st store.PaceState
	fresh, now := true, paceEpoch
	count := func(rate float64, d time.Duration) int {
		n := 0
		end := now.Add(d)
		for now.Before(end) {
			q := p
			q.Now, q.RatePerSec = now, rate
			res, next := store.TakeSlots(st, fresh, q)
			st, fresh = next, false
			if len(res.Slots) == 0 {
				now = now.Add(res.RetryAfter)
				continue
			}
			n++
		}
		return n
	}
	if n := count(2, 5*time.Minute); n < 570 || n > 630 {
		t.Fatalf("at 2/s for 5 min: %d slots, want 600±30", n)
	}
	if n := count(20, 5*time.Minute); n < 5700 || n > 6300 {
		t.Fatalf("at 20/s for 5 min after 2/s: %d slots, want 6000±300", n)
	}

	// Warm-up over 20 s at 10/s: the integral of the ramp from 10% is
	// 20 s × 10/s × 0.55 = 110 slots, then 10/s.
	p.WarmupSec = 20
	st, fresh, now = store.PaceState{}, true, paceEpoch
	if n := count(10, 20*time.Second); n < 90 || n > 130 {
		t.Fatalf("warming 20 s at 10/s: %d slots, want about 110", n)
	}
	if n := count(10, time.Minute); n < 570 || n > 630 {
		t.Fatalf("warm, a minute at 10/s: %d slots, want 600±30", n)
	}
}

// TestRandomPacingProperty: whatever the rate, min gap, batch size,
// horizon and the takers' timing, every slot is granted no earlier than
// its take and within the horizon, slots never repeat, every gap is at
// least the min gap, two consecutive gaps span at least 1/rate, and the
// slots in any span stay within the rate plus a few.
func TestRandomPacingProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rate := rapid.Float64Range(0.2, 500).Draw(rt, "rate")
		mean := time.Duration(float64(time.Second) / rate)
		minGap := time.Duration(rapid.Float64Range(0, 0.75).Draw(rt, "minGapShare") * float64(mean))
		horizon := time.Duration(rapid.Float64Range(0, 3).Draw(rt, "horizonGaps") * float64(mean))
		want := rapid.IntRange(1, 6).Draw(rt, "want")
		seed := rapid.Uint64().Draw(rt, "seed")
		rng := rand.New(rand.NewPCG(seed, 1))
		var (
			st    store.PaceState
			fresh = true
			now   = paceEpoch
			slots []time.Time
		)
		steps := rapid.SliceOfN(rapid.Float64Range(0, 4), 50, 300).Draw(rt, "waits")
		for _, w := range steps {
			res, next := store.TakeSlots(st, fresh, store.TakeSlotsParams{
				Bucket: "b", Want: want, RatePerSec: rate, MinGap: minGap, Now: now, Horizon: horizon, Rand: rng.Float64,
			})
			st, fresh = next, false
			if len(res.Slots) > want {
				rt.Fatalf("%d slots granted, want ≤ %d", len(res.Slots), want)
			}
			if len(res.Slots) < want && res.RetryAfter <= 0 {
				rt.Fatalf("fewer slots than wanted and no retry time")
			}
			for _, s := range res.Slots {
				if s.Before(now) || s.After(now.Add(horizon)) {
					rt.Fatalf("slot at %v outside [take, take+horizon] = [%v, %v]", s.Sub(paceEpoch), now.Sub(paceEpoch), now.Add(horizon).Sub(paceEpoch))
				}
			}
			slots = append(slots, res.Slots...)
			// The taker comes back after a random share of a mean gap.
			now = now.Add(time.Duration(w * float64(mean) * rng.Float64()))
		}
		for i := 1; i < len(slots); i++ {
			if g := slots[i].Sub(slots[i-1]); g < minGap || g <= 0 {
				rt.Fatalf("slots %d and %d %v apart, min gap %v", i-1, i, g, minGap)
			}
			if i >= 2 {
				if d := slots[i].Sub(slots[i-2]); d < mean-time.Microsecond {
					rt.Fatalf("slots %d..%d within %v, under 1/rate %v", i-2, i, d, mean)
				}
			}
		}
		for i := range slots {
			for j := i + 1; j < len(slots); j++ {
				span := slots[j].Sub(slots[i]).Seconds()
				if float64(j-i) > rate*span+7 {
					rt.Fatalf("%d slots in %.3fs at %.3f/s", j-i+1, span, rate)
				}
			}
		}
	})
}
