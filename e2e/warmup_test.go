package e2e

import (
	"math"
	"slices"
	"testing"
	"time"
)

// TestWarmup sends on an account of 100/s (burst 100) with warmup_sec 10
// that has never sent, so its bucket starts warm: by the mock's log the
// first 2 s of sending hold at most 40 % of the full rate's 200 messages,
// no window ever holds more than the ramped rate allows (10 % rising to
// 100 % over 10 s, plus the bucket's ramped capacity), and the rate rises.
func TestWarmup(t *testing.T) {
	t.Parallel()
	const (
		id     = "warm-a"
		rate   = 100.0
		warmup = 10.0
		n      = 300 // about 7 s on the ramp
	)
	m := startMock(t)
	d := startDev(t, m, devOptions{})
	m.setAccount(id, map[string]any{"rate_per_sec": rate, "burst": int(rate)})
	acct := d.putAccount(id, map[string]any{"rate_per_sec": rate, "burst": rate, "warmup_sec": int(warmup)})
	if acct.WarmupSec != int(warmup) {
		t.Fatalf("account warmup_sec %d, want %v", acct.WarmupSec, warmup)
	}
	rcs := recipientsFor(id, n)
	j := d.submit("warmup", jobRequest{Name: "warm-up", Template: testTemplate, Recipients: rcs})
	f := d.waitFinal(j.ID, 60*time.Second)
	ds := m.deliveries()
	checkCompleted(t, f, len(rcs), len(checkExactlyOnce(t, ds, j.ID, rcs)))
	checkNoRateLimited(t, m.stats())

	var ts []time.Time
	for _, dl := range ds {
		ts = append(ts, dl.TS)
	}
	slices.SortFunc(ts, func(x, y time.Time) int { return x.Compare(y) })
	t0 := ts[0]
	perSec := map[int]int{}
	for _, x := range ts {
		perSec[int(x.Sub(t0)/time.Second)]++
	}
	t.Logf("%d sends in %v; per second: %v", len(ts), ts[len(ts)-1].Sub(t0).Round(time.Millisecond), perSec)

	// The limit: at most 40 % of the full rate in the first 2 s.
	first := perSec[0] + perSec[1]
	if first > int(0.4*rate*2) {
		t.Errorf("%d sends in the first 2 s, over 40%% of the full rate's %v", first, rate*2)
	}
	// Never over the ramped rate. The warm period starts when the sender
	// first takes tokens: after the job started, before the mock logs the
	// first send. Counting from the earlier of the job's start and 100 ms
	// before the first send only ever loosens the bound, by a few %. (On
	// the aws backend the take, the budget and the claim before the first
	// send are several round trips to the emulator: on a loaded machine
	// the first take came over 100 ms before the first send.)
	start := t0.Add(-100 * time.Millisecond)
	if f.StartedAt == nil {
		t.Fatalf("job %s completed without a start time", f.ID)
	}
	if f.StartedAt.Before(start) {
		start = *f.StartedAt
	}
	t.Logf("the job started %v before the first send", t0.Sub(*f.StartedAt).Round(time.Millisecond))
	area := func(x time.Time) float64 { // ∫ share of the rate, seconds
		u := x.Sub(start).Seconds()
		if u >= warmup {
			return 0.55*warmup + u - warmup
		}
		return 0.1*u + 0.45*u*u/warmup
	}
	share := func(x time.Time) float64 { return math.Min(1, 0.1+0.9*x.Sub(start).Seconds()/warmup) }
	const senderBurst = rate / 2 // the sender keeps half the account's burst
	for i := range ts {
		for k := i + 1; k < len(ts); k++ {
			// +2 for timestamp granularity between the bucket and the mock's clock.
			if allowed := math.Max(1, senderBurst*share(ts[i])) + rate*(area(ts[k])-area(ts[i])) + 2; float64(k-i+1) > allowed {
				t.Fatalf("%d sends within %v from +%v, over the warming rate (at most %.1f)", k-i+1, ts[k].Sub(ts[i]), ts[i].Sub(t0), allowed)
			}
		}
	}
	// The rate rises: the fifth second outsends the first.
	if perSec[4] <= perSec[0] {
		t.Errorf("sends per second %v: no ramp", perSec)
	}
}
