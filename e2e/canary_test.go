package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// TestPreviewThenCanary: a preview sends nothing and its counts match the
// job that follows; a canary of 25 delivers exactly 25 (spread over the
// accounts), pauses with reason canary, and after resume (approval) the
// job completes with every recipient exactly once — judged by the mock's
// delivery log.
func TestPreviewThenCanary(t *testing.T) {
	t.Parallel()
	m := startMock(t)
	d := startDev(t, m, devOptions{})
	var rcs []recipient
	for _, id := range []string{"can-a", "can-b", "can-c"} {
		d.putAccount(id, map[string]any{"rate_per_sec": 200, "burst": 50})
		rcs = append(rcs, recipientsFor(id, 40)...)
	}
	body := map[string]any{"name": "canary", "template": testTemplate, "recipients": append(rcs, rcs[0]),
		"canary": map[string]any{"count": 25}}

	var pv api.JobPreview
	d.decode(d.call("POST", "/v1/jobs/preview", authHeader(), mustJSON(t, body)), http.StatusOK, &pv)
	if pv.Total != int64(len(rcs)) || pv.Dropped.Duplicate != 1 || len(pv.ByAccount) != 3 || len(pv.Samples) != 5 ||
		pv.Samples[0].Content != expectedContent(rcs[0]) {
		t.Errorf("preview: %+v", pv)
	}
	if n := len(m.deliveries()); n != 0 {
		t.Fatalf("the preview sent %d messages", n)
	}
	if jobs := d.jobs(); len(jobs) != 0 {
		t.Fatalf("the preview stored %d jobs", len(jobs))
	}

	hdr := authHeader()
	hdr.Set("Idempotency-Key", "canary-1")
	var job api.Job
	d.decode(d.call("POST", "/v1/jobs", hdr, mustJSON(t, body)), http.StatusAccepted, &job)
	if job.Total != pv.Total || job.Canary == nil || job.Canary.Count != 25 {
		t.Fatalf("job total %d canary %+v; the preview said %d", job.Total, job.Canary, pv.Total)
	}
	// The canary is part of the request an idempotency key stands for.
	other := map[string]any{"name": "canary", "template": testTemplate, "recipients": append(rcs, rcs[0]),
		"canary": map[string]any{"count": 24}}
	if r := d.call("POST", "/v1/jobs", hdr, mustJSON(t, other)); r.Status != http.StatusConflict {
		t.Errorf("the same key with another canary answered %d, want 409", r.Status)
	}

	var lines int
	j, ok := d.waitJob(job.ID, 30*time.Second, func(j api.Job) bool {
		lines = len(jobDeliveries(m.deliveries(), job.ID))
		return j.Status == "paused" && deref(j.PauseReason) == "canary" && j.Counts.Submitted == 0 && j.Counts.Confirmed == 25
	})
	if !ok {
		t.Fatalf("the job did not pause for its canary after 25 sends: %s (%s), counts %+v, %d delivered", j.Status, deref(j.PauseReason), j.Counts, lines)
	}
	if lines != 25 {
		t.Fatalf("the canary delivered %d messages, want 25", lines)
	}
	per := map[string]int{}
	for _, dl := range jobDeliveries(m.deliveries(), job.ID) {
		per[dl.GUID]++
	}
	if per["can-a"] != 9 || per["can-b"] != 8 || per["can-c"] != 8 {
		t.Errorf("the canary per account: %v, want 9/8/8", per)
	}
	if j.Canary == nil || j.Canary.Confirmed != 25 || j.Canary.Failed != 0 || j.Canary.Approved {
		t.Errorf("the job's canary: %+v", j.Canary)
	}
	if evs := d.alerts("CanaryReady", ""); len(evs) != 1 {
		t.Errorf("%d CanaryReady alerts, want 1", len(evs))
	}
	// Nothing more goes out while it waits.
	time.Sleep(500 * time.Millisecond)
	if n := len(jobDeliveries(m.deliveries(), job.ID)); n != 25 {
		t.Fatalf("%d delivered while waiting for approval", n)
	}

	resumed := d.jobCommand(job.ID, "resume")
	if resumed.Canary == nil || !resumed.Canary.Approved || resumed.Canary.Confirmed != 25 {
		t.Errorf("after approval the canary shows %+v", resumed.Canary)
	}
	final := d.waitFinal(job.ID, 30*time.Second)
	ds := checkExactlyOnce(t, m.deliveries(), job.ID, rcs)
	checkCompleted(t, final, len(rcs), len(ds))
}
