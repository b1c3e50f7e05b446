package store

import (
	"math"
	"testing"
	"time"
)

func TestTakeWarm(t *testing.T) {
	const sec = int64(time.Second)
	p := TakeTokensParams{Want: 1000, RatePerSec: 100, Burst: 100, WarmupSec: 10}
	for name, tc := range map[string]struct {
		b       WarmBucket
		fresh   bool
		now     int64
		granted int
		retry   time.Duration
		after   WarmBucket
	}{
		"fresh bucket: a tenth of the burst": {
			b: WarmBucket{Tokens: 100, At: 5 * sec}, fresh: true, now: 5 * sec,
			granted: 10, after: WarmBucket{At: 5 * sec, WarmStart: 5 * sec}, retry: 100 * time.Millisecond,
		},
		"idle for the period: restart, capped": {
			b: WarmBucket{Tokens: 3, At: sec, WarmStart: 0}, now: 11 * sec,
			granted: 10, after: WarmBucket{At: 11 * sec, WarmStart: 11 * sec}, retry: 100 * time.Millisecond,
		},
		"warm 1 s in: the ramp's integral, 10 + 4.5": {
			b: WarmBucket{At: 100 * sec, WarmStart: 100 * sec}, now: 101 * sec,
			granted: 14, after: WarmBucket{Tokens: 0.5, At: 101 * sec, WarmStart: 100 * sec},
			retry: time.Duration(math.Ceil(0.5 / 19 * float64(time.Second))),
		},
		"6 s in: 110 refilled, capacity 64": {
			b: WarmBucket{At: 104 * sec, WarmStart: 100 * sec}, now: 106 * sec,
			granted: 64, after: WarmBucket{Tokens: 0, At: 106 * sec, WarmStart: 100 * sec},
			retry: time.Duration(math.Ceil(1 / 64.0 * float64(time.Second))),
		},
		"after the period: a plain bucket": {
			b: WarmBucket{At: 112 * sec, WarmStart: 100 * sec}, now: 113 * sec,
			granted: 100, after: WarmBucket{At: 113 * sec, WarmStart: 100 * sec}, retry: 10 * time.Millisecond,
		},
		"no warm period and not idle: full rate": {
			b: WarmBucket{At: 2 * sec}, now: 2*sec + sec/2,
			granted: 50, after: WarmBucket{At: 2*sec + sec/2},
			retry: 10 * time.Millisecond,
		},
	} {
		t.Run(name, func(t *testing.T) {
			res, after := TakeWarm(tc.b, tc.fresh, tc.now, p)
			if res.Granted != tc.granted || math.Abs(after.Tokens-tc.after.Tokens) > 1e-6 || after.At != tc.after.At || after.WarmStart != tc.after.WarmStart {
				t.Fatalf("granted %d, bucket %+v; want %d, %+v", res.Granted, after, tc.granted, tc.after)
			}
			if d := res.RetryAfter - tc.retry; d < -time.Microsecond || d > time.Microsecond {
				t.Fatalf("RetryAfter %v, want %v", res.RetryAfter, tc.retry)
			}
		})
	}
}
