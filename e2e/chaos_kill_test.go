package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// TestChaosKills is the chaos suite's process test: `qunfa dev` is killed
// with SIGKILL at 20 random moments while the mock provider answers 502
// after delivering some messages (a gateway in front of a provider that did
// its work) and loses the answers of others (accepted and logged, then no
// answer). After each restart the counts must add up; after the last one
// the job must complete, and the mock's log must show every recipient
// exactly once with counts that match it. It takes about 30 s; `make
// test` and `make chaos` run it, -short skips it.
func TestChaosKills(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts qunfa dev 20 times (~30 s); skipped with -short")
	}
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("QUNFA_E2E_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, 0x2545f4914f6cdd1d))
	t.Logf("seed %d (set QUNFA_E2E_SEED to repeat the kill moments)", seed)
	kills := 20
	if s := os.Getenv("QUNFA_CHAOS_KILLS"); s != "" {
		kills, _ = strconv.Atoi(s)
	}

	accounts := []struct {
		id         string
		rate       float64
		recipients int
	}{{"chaos-a", 100, 1200}, {"chaos-b", 60, 800}}
	m := startMock(t)
	d := startDev(t, m, devOptions{})
	var rcs []recipient
	for _, a := range accounts {
		m.setAccount(a.id, map[string]any{"rate_per_sec": a.rate, "burst": int(a.rate), "latency_ms": 30,
			"gateway_errors": []map[string]any{{"status": 502, "ratio": 0.05, "after_delivery": true}},
			"timeout_ratio":  0.02})
		d.putAccount(a.id, map[string]any{"rate_per_sec": a.rate, "burst": a.rate, "online_reserve_per_sec": a.rate / 10})
		rcs = append(rcs, recipientsFor(a.id, a.recipients)...)
	}
	rng.Shuffle(len(rcs), func(i, j int) { rcs[i], rcs[j] = rcs[j], rcs[i] })
	job := d.submit("chaos-kills", jobRequest{Name: "chaos kills", Template: testTemplate, Recipients: rcs})
	sane := countsChecker(t)
	for k := 1; k <= kills; k++ {
		delay := 200*time.Millisecond + time.Duration(rng.Int64N(int64(1300*time.Millisecond)))
		time.Sleep(delay) // the random moment of the kill is the point here
		d.kill()
		d.start()
		sane(d.job(job.ID), fmt.Sprintf("right after restart %d", k))
	}
	lastStart := time.Now()
	// The mock is calm from now on, so the job can complete.
	for _, a := range accounts {
		m.setAccount(a.id, map[string]any{"gateway_errors": []map[string]any{}, "timeout_ratio": 0})
	}
	var final api.Job
	poll(2*time.Minute, 100*time.Millisecond, func() bool {
		final = d.job(job.ID)
		sane(final, "while finishing")
		return final.Status != "running"
	})
	t.Logf("job %s %s %v after the last of %d restarts: counts %+v, failures %v",
		job.ID, final.Status, time.Since(lastStart).Round(100*time.Millisecond), kills, final.Counts, final.Failures)
	lines := checkExactlyOnce(t, m.deliveries(), job.ID, rcs)
	checkCompleted(t, final, len(rcs), len(lines))
	var gateway int64
	for _, s := range m.stats() {
		gateway += s.GatewayErrors
	}
	if gateway == 0 {
		t.Errorf("the mock answered no 502 after delivery: the test did not test what it says")
	}
}
