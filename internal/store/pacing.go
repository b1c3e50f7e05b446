package store

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// PacingRandom is the pacing mode that spaces an account's sends by random
// gaps (issue 20); the empty mode is the token bucket.
const PacingRandom = "random"

// MaxMinGapMs bounds an account's pacing min_gap_ms (one minute).
const MaxMinGapMs = 60000

// Pacing is an account's pacing option: Mode "" (the token bucket, with
// its bursts) or PacingRandom (random gaps around 1/batch rate, never
// closer than MinGapMs, never in bursts).
type Pacing struct {
	Mode     string `json:"mode"`
	MinGapMs int    `json:"min_gap_ms"`
}

// Random tells whether the account's sends are spaced by random gaps.
func (p Pacing) Random() bool { return p.Mode == PacingRandom }

// TakeSlotsParams takes send slots from an account's random schedule.
type TakeSlotsParams struct {
	Bucket     string // the account's bucket name (its schedule has its own record)
	Want       int    // the most slots wanted (one provider call each)
	RatePerSec float64
	MinGap     time.Duration
	// WarmupSec ramps the rate from 10% to 100% after that long without a
	// slot, as TakeWarm does for a bucket (0: no warm-up).
	WarmupSec float64
	Now       time.Time
	// Horizon: slots up to Now + Horizon are granted (the caller waits
	// for each before its call).
	Horizon time.Duration
	// Rand draws in [0,1) for the gaps (nil: math/rand/v2).
	Rand func() float64
}

// Validate checks the parameters every adapter refuses with
// ErrInvalidArgument.
func (p TakeSlotsParams) Validate() error {
	var errs []error
	if p.Bucket == "" {
		errs = append(errs, errors.New("bucket is empty"))
	}
	if p.Want < 0 || p.MinGap < 0 || p.Horizon < 0 {
		errs = append(errs, errors.New("want, min gap and horizon must not be negative"))
	}
	for name, v := range map[string]float64{"rate": p.RatePerSec, "warm-up": p.WarmupSec} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			errs = append(errs, fmt.Errorf("%s %v is not a finite number ≥ 0", name, v))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("take slots: %w: %w", ErrInvalidArgument, err)
	}
	return nil
}

// PaceRecord names the stored record of the random schedule of bucket.
func PaceRecord(bucket string) string { return "pace:" + bucket }

// TakeSlotsResult is the granted slots, in order (a call goes out at its
// slot, not before), and, when fewer than wanted, how long until the next
// slot comes within the horizon.
type TakeSlotsResult struct {
	Slots      []time.Time
	RetryAfter time.Duration
}

// PaceState is the stored state of an account's random schedule. Times
// and durations are Unix nanoseconds, as both adapters store them.
type PaceState struct {
	// Next is the next slot; Gap the gap drawn from the previous slot to
	// it, for MeanGap seconds (the mean gap when it was drawn), and
	// PrevGap the gap before the previous slot.
	Next, Gap, PrevGap int64
	MeanGap            float64
	// Drift is how far, in seconds, the slots so far lag behind an exact
	// schedule at the mean gap (negative: ahead); the next gaps pull it
	// back, so any minute's average is the batch rate.
	Drift float64
	// WarmStart is the start of the current warm period (0: none).
	WarmStart int64
}

// The shape of the gaps. A gap is drawn between a floor and paceMaxGaps
// mean gaps, as floor + (ceiling - floor)·u^k with k chosen so that the
// gap's expected value is the mean gap (pulled by the drift): mostly short
// gaps near the floor and some long ones, a coefficient of variation of
// about 0.65 at the usual floors, where a clipped exponential has one
// under 0.45. Two consecutive gaps together are at least the mean gap plus
// twice the jitter allowance, so no window of 1/rate holds three sends,
// and every gap is at least the min gap plus the allowance: the jitter
// allowance (a fifth of the mean gap, at most 20 ms) is what a send may
// arrive late at the provider (scheduling, the network) without breaking
// either promise.
const (
	paceMaxGaps   = 3.5  // ceiling, in mean gaps
	paceFloorGaps = 0.25 // lowest floor, in mean gaps, whatever the min gap
	paceJitter    = 20 * time.Millisecond
	paceDriftPull = 0.5 // share of the drift the next gap's mean makes up
	paceLagMax    = 4.0 // lag made up at most, in mean gaps
	paceAheadMax  = 1.0 // lead over the exact schedule at most, in mean gaps
)

// PaceGaps is the limits of the gaps at a mean gap of mean seconds with
// the given min gap: every gap is at least floor, two consecutive gaps add
// up to at least pair, and no gap exceeds ceiling (all in seconds).
func PaceGaps(mean float64, minGap time.Duration) (floor, pair, ceiling float64) {
	jitter := math.Min(mean/5, paceJitter.Seconds())
	floor = math.Max(minGap.Seconds(), paceFloorGaps*mean) + jitter
	return floor, mean + 2*jitter, math.Max(paceMaxGaps*mean, floor)
}

// DrawGap draws the gap after a slot whose own gap was prev seconds, for a
// schedule at mean seconds per send that lags drift seconds behind, from
// u in [0,1). Its expected value is mean − paceDriftPull·drift, kept within
// its bounds; it is the floor when the bounds leave no room (a min gap
// near the mean gap: the rate is then a little under the batch rate,
// never over it).
func DrawGap(mean, prev, drift float64, minGap time.Duration, u float64) float64 {
	floor, pair, ceiling := PaceGaps(mean, minGap)
	lo := math.Max(floor, pair-prev)
	if lo >= 0.95*ceiling {
		return lo
	}
	if drift <= -paceAheadMax*mean {
		// Ahead of the exact schedule by paceAheadMax gaps: no gap under
		// the mean until that is made up. With the lag made up at most
		// (paceLagMax), the slots in any span exceed the rate's by at most
		// about paceLagMax + paceAheadMax + 1, spread at the floor and pair
		// limits, never in a burst.
		lo = math.Max(lo, mean)
		if lo >= 0.95*ceiling {
			return lo
		}
	}
	m := mean - paceDriftPull*drift
	m = math.Min(math.Max(m, lo+0.02*(ceiling-lo)), lo+0.5*(ceiling-lo))
	// E[u^k] = 1/(k+1) = (m−lo)/(ceiling−lo).
	k := (ceiling - m) / (m - lo)
	return lo + (ceiling-lo)*math.Pow(u, k)
}

// TakeSlots grants slots of s, the random schedule of an account, for p:
// the next slot and those after it up to p.Now + p.Horizon, at most
// p.Want. A slot already past is granted at p.Now (a late taker does not
// send early to catch up; the drift makes the next gaps up for it, up to
// paceLagMax mean gaps; after an idle spell longer than a gap's ceiling
// the gap before constrains nothing). When the rate changed since the pending gap was drawn
// (a rate change, the warm-up ramp), that gap is rescaled to the current
// mean first. It returns the result and the new state; fresh tells a
// schedule never stored.
func TakeSlots(s PaceState, fresh bool, p TakeSlotsParams) (TakeSlotsResult, PaceState) {
	draw := p.Rand
	if draw == nil {
		draw = rand.Float64
	}
	now := p.Now.UnixNano()
	horizon := now + int64(p.Horizon)
	period := int64(p.WarmupSec * float64(time.Second))
	var res TakeSlotsResult
	if p.RatePerSec <= 0 || p.Want <= 0 {
		if p.Want > 0 {
			res.RetryAfter = time.Duration(math.MaxInt64)
		}
		return res, s
	}
	if fresh {
		s = PaceState{Next: now}
	}
	for len(res.Slots) < p.Want {
		last := s.Next - s.Gap // the previous slot
		warm := s.WarmStart
		if period > 0 && (fresh || now-last >= period) && len(res.Slots) == 0 {
			warm = now // idle: warm up again from the floor
		}
		at := max(s.Next, now)
		mean := 1 / (p.RatePerSec * warmFraction(warm, at, period))
		next := s.Next
		if !fresh && s.MeanGap > 0 && mean != s.MeanGap {
			// Rescale the pending gap to the current mean, keeping its
			// limits at that mean.
			floor, pair, _ := PaceGaps(mean, p.MinGap)
			lo := floor
			if s.PrevGap > 0 {
				lo = math.Max(lo, pair-float64(s.PrevGap)/float64(time.Second))
			}
			g := math.Max(float64(s.Gap)/float64(time.Second)*mean/s.MeanGap, lo)
			next = last + int64(math.Ceil(g*float64(time.Second)))
			at = max(next, now)
		}
		if next > horizon {
			res.RetryAfter = time.Duration(next - horizon)
			break
		}
		gap := float64(at-last) / float64(time.Second)
		_, _, ceiling := PaceGaps(mean, p.MinGap)
		switch {
		case fresh:
			s.Drift, gap = 0, math.Inf(1)
		default:
			// A lag counts up to paceLagMax mean gaps (idle spells are
			// not made up for beyond that).
			s.Drift = math.Min(paceLagMax*mean, s.Drift+gap-mean)
			if float64(at-next)/float64(time.Second) > ceiling {
				gap = math.Inf(1) // idle: the gap before is no constraint
			}
		}
		g := DrawGap(mean, gap, s.Drift, p.MinGap, draw())
		res.Slots = append(res.Slots, time.Unix(0, at).UTC())
		prev := int64(0)
		if !math.IsInf(gap, 1) {
			prev = at - last
		}
		gapNs := int64(math.Ceil(g * float64(time.Second)))
		s = PaceState{Next: at + gapNs, Gap: gapNs, PrevGap: prev, MeanGap: mean, Drift: s.Drift, WarmStart: warm}
		fresh = false
	}
	return res, s
}
