package e2e

import (
	"math"
	"slices"
	"testing"
	"time"
)

// pacingVerdict is the judgment of issue 20 on an account's send times as
// the provider logged them.
type pacingVerdict struct {
	sends       int
	rate        float64       // sends per second, first to last
	closest     time.Duration // the closest two sends
	mostInGap   int           // the most sends in any window of 1/rate
	cv          float64       // coefficient of variation of the gaps
	meanGap     time.Duration
	longestGaps []time.Duration
}

// judgePacing measures ts (any order) against a target rate.
func judgePacing(ts []time.Time, rate float64) pacingVerdict {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	v := pacingVerdict{sends: len(ts), closest: time.Hour}
	if len(ts) < 3 {
		return v
	}
	window := time.Duration(float64(time.Second) / rate)
	var gaps []float64
	j := 0
	for i := range ts {
		if i > 0 {
			g := ts[i].Sub(ts[i-1])
			v.closest = min(v.closest, g)
			gaps = append(gaps, g.Seconds())
		}
		for ts[i].Sub(ts[j]) >= window {
			j++
		}
		v.mostInGap = max(v.mostInGap, i-j+1)
	}
	span := ts[len(ts)-1].Sub(ts[0]).Seconds()
	v.rate = float64(len(gaps)) / span
	mean := span / float64(len(gaps))
	var sq float64
	for _, g := range gaps {
		sq += (g - mean) * (g - mean)
	}
	v.cv = math.Sqrt(sq/float64(len(gaps))) / mean
	v.meanGap = time.Duration(mean * float64(time.Second))
	slices.Sort(gaps)
	for _, g := range gaps[max(0, len(gaps)-3):] {
		v.longestGaps = append(v.longestGaps, time.Duration(g*float64(time.Second)).Round(time.Millisecond))
	}
	return v
}

// check applies the four criteria of issue 20.
func (v pacingVerdict) check(t *testing.T, rate float64, minGap time.Duration) {
	t.Helper()
	t.Logf("%d sends: %.3f/s, closest %v, at most %d in %v, cv %.3f, mean gap %v, longest %v",
		v.sends, v.rate, v.closest.Round(time.Microsecond), v.mostInGap, time.Duration(float64(time.Second)/rate), v.cv, v.meanGap.Round(time.Microsecond), v.longestGaps)
	if math.Abs(v.rate-rate) > 0.05*rate {
		t.Errorf("average rate %.3f/s, not within 5%% of %v/s", v.rate, rate)
	}
	if v.closest < minGap {
		t.Errorf("two sends %v apart, closer than min_gap_ms %v", v.closest, minGap)
	}
	if v.mostInGap > 2 {
		t.Errorf("%d sends within 1/rate: a burst", v.mostInGap)
	}
	if v.cv <= 0.5 {
		t.Errorf("gaps' coefficient of variation %.3f, not above 0.5: too regular", v.cv)
	}
}

// TestRandomPacing (issue 20): an account at 10/s with pacing random and
// min_gap_ms 30 sends a minute's worth; judged by the mock's log, its
// average rate is within 5 % of 10/s, no two sends are closer than 30 ms,
// no 100 ms holds more than two, and the gaps vary (coefficient of
// variation above 0.5).
func TestRandomPacing(t *testing.T) {
	t.Parallel()
	const (
		id     = "paced-a"
		rate   = 10.0
		minGap = 30 * time.Millisecond
		n      = 601 // a minute at 10/s
	)
	m := startMock(t)
	d := startDev(t, m, devOptions{})
	acct := d.putAccount(id, map[string]any{"rate_per_sec": rate, "burst": rate,
		"pacing": map[string]any{"mode": "random", "min_gap_ms": minGap.Milliseconds()}})
	if acct.Pacing == nil || acct.Pacing.Mode != "random" || acct.Pacing.MinGapMs != int(minGap.Milliseconds()) {
		t.Fatalf("account pacing %+v, want random with 30 ms", acct.Pacing)
	}
	rcs := recipientsFor(id, n)
	j := d.submit("paced", jobRequest{Name: "paced", Template: testTemplate, Recipients: rcs})
	f := d.waitFinal(j.ID, 2*time.Minute)
	ds := m.deliveries()
	checkCompleted(t, f, len(rcs), len(checkExactlyOnce(t, ds, j.ID, rcs)))
	checkNoRateLimited(t, m.stats())
	var ts []time.Time
	for _, dl := range ds {
		ts = append(ts, dl.TS)
	}
	judgePacing(ts, rate).check(t, rate, minGap)
	if t.Failed() {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(ts); i++ {
			if ts[i].Sub(ts[i-1]) < minGap {
				t.Logf("close: #%d at %v, %v after the previous", i, ts[i].Format("15:04:05.000000"), ts[i].Sub(ts[i-1]))
			}
		}
	}
}
