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

// TestKillAndRestart SIGKILLs `qunfa dev` at random moments while it sends
// a job over three rate-limited accounts, restarting it on the same data
// directory each time. The mock provider runs throughout, so its log sees
// every send of every run: each recipient must be there exactly once, the
// job must complete with counts that match the log, and the mock must
// never have had to refuse a call for rate. The job must also resume
// promptly: the reconciler re-drives idle shards after --stale-after and
// settles items left `submitted` after SettleAfter, so a job that sits
// still for a minute after the last restart fails the test.
func TestKillAndRestart(t *testing.T) { testKillAndRestart(t, "") }

// TestKillAndRestartAWS is TestKillAndRestart on `qunfa dev --backend aws
// --emulators`: SIGKILLs in the middle of DynamoDB claims and SQS
// hand-backs (the emulators die with the process and restart on their
// data), the dead process's turns coming back when their visibility
// (awsVisibility) expires.
func TestKillAndRestartAWS(t *testing.T) {
	skipIfAllAWS(t)
	testKillAndRestart(t, backendAWS)
}

func testKillAndRestart(t *testing.T, backend string) {
	if testing.Short() {
		t.Skip("kills and restarts qunfa for ~30 s; skipped with -short")
	}
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("QUNFA_E2E_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	t.Logf("seed %d (set QUNFA_E2E_SEED to repeat)", seed)

	accounts := []struct {
		id         string
		rate       float64
		recipients int
	}{{"kill-a", 300, 1500}, {"kill-b", 200, 1000}, {"kill-c", 100, 500}}

	m := startMock(t)
	d := startDev(t, m, devOptions{Backend: backend})
	var rcs []recipient
	for _, a := range accounts {
		// Latency keeps calls in flight, so a kill leaves items claimed
		// and maybe delivered but unrecorded: the reconciler's work.
		m.setAccount(a.id, map[string]any{"rate_per_sec": a.rate, "burst": int(a.rate), "latency_ms": 40})
		d.putAccount(a.id, map[string]any{"rate_per_sec": a.rate, "burst": a.rate, "online_reserve_per_sec": a.rate / 10})
		rcs = append(rcs, recipientsFor(a.id, a.recipients)...)
	}
	rng.Shuffle(len(rcs), func(i, j int) { rcs[i], rcs[j] = rcs[j], rcs[i] })
	job := d.submit("kill-test", jobRequest{Name: "kill test", Template: testTemplate, Recipients: rcs})
	if job.Total != int64(len(rcs)) {
		t.Fatalf("job total %d, want %d", job.Total, len(rcs))
	}
	sane := countsChecker(t)

	kills := 3 + rng.IntN(2)
	for k := 1; k <= kills; k++ {
		delay := 300*time.Millisecond + time.Duration(rng.Int64N(int64(1700*time.Millisecond)))
		time.Sleep(delay) // the random moment of the kill is the point here
		d.kill()
		atKill := len(jobDeliveries(m.deliveries(), job.ID))
		d.start()
		after := d.job(job.ID)
		sane(after, fmt.Sprintf("right after restart %d", k))
		t.Logf("kill %d/%d after %v: the log had %d lines of the job; right after the restart: %s, counts %+v",
			k, kills, delay.Round(time.Millisecond), atKill, after.Status, after.Counts)
		if after.Status != "running" && after.Status != "completed" {
			t.Errorf("after restart %d the job is %q, want running or completed", k, after.Status)
		}
		// Every message the mock delivered must soon be accounted for as
		// confirmed, or as submitted (in doubt, for the reconciler) — never
		// as pending, which would mean "not sent" (DESIGN rule 2).
		var j api.Job
		accounted := poll(5*time.Second, 50*time.Millisecond, func() bool {
			j = d.job(job.ID)
			sane(j, fmt.Sprintf("after restart %d", k))
			return j.Counts.Confirmed+j.Counts.Submitted >= int64(atKill)
		})
		if !accounted {
			t.Errorf("5 s after restart %d the job shows %d confirmed + %d submitted, but the mock had delivered %d of its messages before the kill: "+
				"delivered messages are shown as pending (counts %+v)", k, j.Counts.Confirmed, j.Counts.Submitted, atKill, j.Counts)
		}
	}
	lastStart := time.Now()

	// After the last start the work left is at most ~6 s of sending, plus
	// settling items left submitted (SettleAfter = 3 s + 2 × 1 s + 5 s =
	// 10 s), plus re-driving idle shards (stale-after 3 s, reconcile every
	// 1 s). A minute is generous.
	wait := time.Minute
	if s := os.Getenv("QUNFA_E2E_KILL_WAIT"); s != "" {
		if w, err := time.ParseDuration(s); err == nil {
			wait = w
		}
	}
	var final api.Job
	poll(wait, 100*time.Millisecond, func() bool {
		final = d.job(job.ID)
		sane(final, "while finishing")
		return final.Status != "running"
	})
	t.Logf("job %s %s %v after the last restart: counts %+v, failures %v",
		job.ID, final.Status, time.Since(lastStart).Round(100*time.Millisecond), final.Counts, final.Failures)
	if final.Status == "running" {
		t.Errorf("job %s is still running %v after the last restart, though the reconciler re-drives shards idle for 3 s (--stale-after) every 1 s "+
			"and settles submitted items after 10 s: after a SIGKILL, `qunfa dev` did not resume the job in time (DESIGN: local runtime, resume after any stop)",
			job.ID, wait)
		for _, sh := range final.Shards {
			t.Logf("shard %d (%s): %s, cursor %d, last advanced %v, counts %+v",
				sh.Index, sh.Account, sh.Status, sh.Cursor, sh.LastAdvancedAt, sh.Counts)
		}
	}
	lines := checkExactlyOnce(t, m.deliveries(), job.ID, rcs)
	checkCompleted(t, final, len(rcs), len(lines))
	stats := m.stats()
	checkNoRateLimited(t, stats)
	var accepted int64
	for _, s := range stats {
		accepted += s.Accepted
	}
	if accepted != int64(len(lines)) {
		t.Errorf("mock stats say %d accepted, the log has %d lines", accepted, len(lines))
	}

	var settledConfirmed, settledRepended, redriven float64
	for _, ev := range d.logEvents("reconciled") {
		c, _ := ev["confirmed"].(float64)
		r, _ := ev["repended"].(float64)
		rd, _ := ev["redriven"].(float64)
		settledConfirmed += c
		settledRepended += r
		redriven += rd
	}
	t.Logf("kills: %d; the reconciler settled %v submitted items as delivered (status look-up) and re-pended %v never-accepted ones; %v shard re-drives",
		kills, settledConfirmed, settledRepended, redriven)
}

// countsChecker returns a function that checks one observation of a job:
// no count below zero, counts adding up to the total (DESIGN rule 2). It
// reports each kind of violation once.
func countsChecker(t *testing.T) func(j api.Job, when string) {
	reported := map[string]bool{}
	return func(j api.Job, when string) {
		t.Helper()
		c := j.Counts
		if (c.Pending < 0 || c.Submitted < 0 || c.Confirmed < 0 || c.Failed < 0 || c.Abandoned < 0) && !reported["negative"] {
			reported["negative"] = true
			t.Errorf("%s the job shows a negative count: %+v (shards: %s)", when, c, shardCounts(j))
		}
		if c.Total() != j.Total && !reported["sum"] {
			reported["sum"] = true
			t.Errorf("%s the counts add up to %d, not the total %d (DESIGN rule 2): %+v", when, c.Total(), j.Total, c)
		}
	}
}

func shardCounts(j api.Job) string {
	s := ""
	for _, sh := range j.Shards {
		s += fmt.Sprintf("[%d %s %+v] ", sh.Index, sh.Account, sh.Counts)
	}
	return s
}
