package e2e

import (
	"syscall"
	"testing"
	"time"
)

// TestGracefulStop sends SIGTERM to `qunfa dev` in the middle of a job: it
// must exit 0 within a few seconds, having finished the batches in hand.
// Started again on the same data directory it resumes at once and
// completes the job, every recipient exactly once. Because a clean stop
// leaves no item `submitted`, the job completes well before the
// reconciler could settle such an item (SettleAfter = 3 s + 2 ×
// provider-timeout + 5 s = 10 s here): a job that needs the reconciler
// after a clean stop fails the test.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	const (
		rate     = 300.0 // batch rate 270/s
		total    = 1000
		stopAt   = 400 // confirmed items
		exitTime = 5 * time.Second
		// The work left after the stop takes ~2.2 s at the batch rate; a
		// job waiting for the reconciler would take ≥ 10 s.
		resumeTime = 7 * time.Second
	)
	m := startMock(t)
	d := startDev(t, m, devOptions{})
	m.setAccount("grace-a", map[string]any{"rate_per_sec": rate, "burst": int(rate)})
	d.putAccount("grace-a", map[string]any{"rate_per_sec": rate, "burst": rate, "online_reserve_per_sec": rate / 10})
	rcs := recipientsFor("grace-a", total)
	job := d.submit("graceful", jobRequest{Name: "graceful", Template: testTemplate, Recipients: rcs})

	if !poll(30*time.Second, 10*time.Millisecond, func() bool { return d.job(job.ID).Counts.Confirmed >= stopAt }) {
		t.Fatalf("job %s never reached %d confirmed items", job.ID, stopAt)
	}
	code, took, exited := d.proc.stop(syscall.SIGTERM, exitTime)
	if !exited {
		t.Fatalf("qunfa dev still runs %v after SIGTERM", exitTime)
	}
	atStop := len(jobDeliveries(m.deliveries(), job.ID))
	t.Logf("SIGTERM: exit code %d after %v; the log had %d lines of the job", code, took.Round(time.Millisecond), atStop)
	if code != 0 {
		t.Errorf("qunfa dev exited with code %d after SIGTERM, want 0", code)
	}
	if atStop >= total {
		t.Fatalf("the job had finished before the stop (%d lines); the test proves nothing", atStop)
	}

	// The resume is timed from when the restarted process answers: on the
	// aws backend its start includes the emulators' (dynalite and fauxqs
	// reopening their data: over 5 s on a loaded machine).
	d.start()
	restarted := time.Now()
	after := d.job(job.ID)
	t.Logf("right after the restart: %s, counts %+v", after.Status, after.Counts)
	if after.Counts.Confirmed < int64(atStop) {
		t.Errorf("after a clean stop %d are confirmed but the log has %d lines of the job: the stop lost outcomes", after.Counts.Confirmed, atStop)
	}
	final := d.waitFinal(job.ID, 60*time.Second)
	resumed := time.Since(restarted)
	t.Logf("job %s %s %v after the restart", job.ID, final.Status, resumed.Round(10*time.Millisecond))
	lines := checkExactlyOnce(t, m.deliveries(), job.ID, rcs)
	checkCompleted(t, final, total, len(lines))
	checkNoRateLimited(t, m.stats())
	if resumed > resumeTime {
		t.Errorf("the job took %v to complete after the restart, more than %v: the clean stop left work for the reconciler", resumed, resumeTime)
	}
	// And by the reconciler's own account: it settled no item. (A shard
	// re-drive is no settling: it re-enqueues a turn of a shard whose
	// message is gone.)
	for _, ev := range d.logEvents("reconciled") {
		for _, k := range []string{"confirmed", "repended", "under_review"} {
			if n, _ := ev[k].(float64); n > 0 {
				t.Errorf("the reconciler settled items after a clean stop: %v", ev)
			}
		}
	}
}
