package webhook

import (
	"math"
	"time"
)

// Retry is the retry policy of deliveries: exponential backoff with jitter,
// up to MaxAttempts attempts, after which a delivery is failed.
type Retry struct {
	Base        time.Duration // wait after the first failed attempt (before jitter)
	Cap         time.Duration // longest wait
	MaxAttempts int
}

// DefaultRetry waits 30 s, 1 min, 2 min, … up to 4 h between attempts, 15
// attempts in all: a delivery is failed about a day (18–24 h with jitter)
// after its first attempt.
var DefaultRetry = Retry{Base: 30 * time.Second, Cap: 4 * time.Hour, MaxAttempts: 15}

func (r Retry) withDefaults() Retry {
	if r.Base <= 0 {
		r.Base = DefaultRetry.Base
	}
	if r.Cap <= 0 {
		r.Cap = DefaultRetry.Cap
	}
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = DefaultRetry.MaxAttempts
	}
	return r
}

// Wait is how long to wait after the attempt-th failed attempt (from 1):
// min(Cap, Base·2^(attempt−1)), of which the upper half is jitter drawn
// with j ∈ [0,1) — "equal jitter", so retries of many deliveries spread
// out but none comes back sooner than half its step.
func (r Retry) Wait(attempt int, j float64) time.Duration {
	r = r.withDefaults()
	if attempt < 1 {
		attempt = 1
	}
	step := float64(r.Cap)
	if attempt < 62 {
		step = math.Min(step, float64(r.Base)*math.Pow(2, float64(attempt-1)))
	}
	return time.Duration(step/2 + j*step/2)
}
