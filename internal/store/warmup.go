package store

import (
	"math"
	"time"
)

// WarmupFloor is the share of the full rate and burst a bucket starts its
// warm-up with; it ramps linearly to 1 over the warm-up period.
const WarmupFloor = 0.1

// WarmBucket is a token bucket's state under warm-up (issue 13): Tokens
// held at At (the last take that granted tokens), and WarmStart, the start
// of its current warm period (0: none, the bucket runs at full rate).
// Times are Unix nanoseconds, as both adapters store them.
type WarmBucket struct {
	Tokens    float64
	At        int64
	WarmStart int64
}

// TakeWarm refills b up to now and takes what p asks for, for a bucket
// with p.WarmupSec > 0. A take coming p.WarmupSec or more after the last
// grant (or on a bucket never used, fresh) restarts the warm period at
// now. While warm, the rate is p.RatePerSec × f and the capacity
// max(1, p.Burst × f), with f ramping from WarmupFloor to 1 over
// p.WarmupSec; the refill between two takes is the integral of that rate,
// so it never exceeds the ramped rate, and the capacity at now caps what
// the bucket gathered while idle. RetryAfter counts on the rate at now,
// which the ramp only raises, so a retry never comes too early.
// After the period the bucket is an ordinary one (capacity max(1, burst)).
func TakeWarm(b WarmBucket, fresh bool, now int64, p TakeTokensParams) (TakeTokensResult, WarmBucket) {
	period := int64(p.WarmupSec * float64(time.Second))
	if fresh || now-b.At >= period {
		// Idle: whatever refilled meanwhile is capped below at the floor.
		if now > b.At {
			b.Tokens += p.RatePerSec * float64(now-b.At) / float64(time.Second)
		}
		b.At, b.WarmStart = max(b.At, now), now
	} else if now > b.At {
		b.Tokens += p.RatePerSec * (warmArea(b.WarmStart, now, period) - warmArea(b.WarmStart, b.At, period))
		b.At = now
	}
	f := warmFraction(b.WarmStart, b.At, period)
	b.Tokens = min(b.Tokens, max(p.Burst*f, 1))
	grant := int(min(float64(p.Want), math.Floor(b.Tokens+1e-9)))
	grant = max(grant, 0)
	b.Tokens -= float64(grant)
	res := TakeTokensResult{Granted: grant}
	if grant < p.Want {
		res.RetryAfter = warmRetry(1-b.Tokens, p.RatePerSec*f)
	}
	return res, b
}

// warmFraction is the share of the full rate a bucket warming since start
// has at t (1 once the period is over, or without a warm period).
func warmFraction(start, t, period int64) float64 {
	if start == 0 || period <= 0 || t-start >= period {
		return 1
	}
	if t <= start {
		return WarmupFloor
	}
	return WarmupFloor + (1-WarmupFloor)*float64(t-start)/float64(period)
}

// warmArea is the integral, in seconds, of warmFraction from start to t: the
// tokens one unit of rate gives over that time.
func warmArea(start, t, period int64) float64 {
	u := float64(t-start) / float64(time.Second)
	if start == 0 || period <= 0 {
		return u
	}
	if u <= 0 {
		return 0
	}
	s := float64(period) / float64(time.Second)
	if u >= s {
		return (1+WarmupFloor)/2*s + (u - s)
	}
	return WarmupFloor*u + (1-WarmupFloor)/2*u*u/s
}

// warmRetry is how long rate takes to gain need tokens, rounded up.
func warmRetry(need, rate float64) time.Duration {
	if need <= 0 {
		return 0
	}
	if rate <= 0 {
		return time.Duration(math.MaxInt64)
	}
	d := math.Ceil(need / rate * float64(time.Second))
	if d >= float64(math.MaxInt64) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d)
}
