package e2e

import (
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/devstack"
)

// TestCampaignFiresOnce creates a campaign with schedule rate(1 minute) in
// a running `qunfa dev` and waits for its firing at the next whole minute
// (the local runtime counts rates from the epoch). The firing must make
// one job; then the same firing is delivered again, twice: by a SIGKILL
// and restart right after it (the local scheduler looks for due firings
// at once) and by posting the firing's job request with the firing's
// idempotency key, as a second EventBridge delivery would submit it. One
// job must come out, delivered once.
//
// qunfa has no way to fire a campaign on demand through the running
// process, so this test waits up to a minute: it runs only with
// QUNFA_E2E_CAMPAIGN=1. The in-process tests of internal/campaign
// (TestFireTwiceOneJob) cover a double firing without the wait.
func TestCampaignFiresOnce(t *testing.T) {
	if os.Getenv("QUNFA_E2E_CAMPAIGN") == "" {
		t.Skip("waits up to a minute for a campaign's firing (no on-demand firing exists); set QUNFA_E2E_CAMPAIGN=1 to run")
	}
	t.Parallel()
	const acct, id = "camp-a", "e2e-campaign"
	m := startMock(t)
	d := startDev(t, m, devOptions{})
	d.putAccount(acct, map[string]any{"rate_per_sec": 500})
	rcs := recipientsFor(acct, 20)
	req := jobRequest{Name: "campaign", Template: testTemplate, Recipients: rcs}
	var c api.Campaign
	d.decode(d.call("POST", "/v1/campaigns", nil, mustJSON(t, map[string]any{
		"id": id, "name": "e2e campaign", "schedule": "rate(1 minute)", "mode": "snapshot", "request": req,
	})), http.StatusCreated, &c)
	if c.NextFireAt == nil {
		t.Fatalf("the campaign has no next_fire_at: %+v", c)
	}
	at := *c.NextFireAt
	t.Logf("campaign %s fires at %v (in %v)", id, at, time.Until(at).Round(time.Second))

	campaignJobs := func() []api.Job {
		var out []api.Job
		for _, j := range d.jobs() {
			if j.CreatedBy == "campaign:"+id {
				out = append(out, j)
			}
		}
		return out
	}
	var jobs []api.Job
	if !poll(time.Until(at)+15*time.Second, 100*time.Millisecond, func() bool {
		jobs = campaignJobs()
		return len(jobs) > 0
	}) {
		t.Fatalf("no job of campaign %s 15 s after its firing time %v", id, at)
	}
	// The firing delivered again: a crash right after it, then a restart.
	d.kill()
	d.start()
	time.Sleep(3 * devstack.CampaignTick) // the restarted scheduler looks for due firings
	jobs = campaignJobs()
	if len(jobs) != 1 {
		t.Fatalf("after a restart right after the firing the campaign has %d jobs, want 1: %+v", len(jobs), jobs)
	}
	job := jobs[0]
	// ... and through the submission path with the firing's key.
	key := campaign.IdempotencyKey(id, at)
	r := d.call("POST", "/v1/jobs", http.Header{"Idempotency-Key": {key}}, mustJSON(t, req))
	t.Logf("POST /v1/jobs with the firing's key %q: HTTP %d", key, r.Status)
	switch r.Status {
	case http.StatusAccepted:
		if r.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("POST /v1/jobs with the firing's key %q made a new job (no Idempotent-Replayed: true)", key)
		}
		var again api.Job
		d.decode(r, http.StatusAccepted, &again)
		if again.ID != job.ID {
			t.Errorf("the firing's key gave job %s, want the campaign's %s", again.ID, job.ID)
		}
	case http.StatusConflict: // the same key with a body not quite the campaign's: refused, fine
	default:
		t.Errorf("POST /v1/jobs with the firing's key %q: HTTP %d, want 202 replayed (the same job) or 409: %s", key, r.Status, r.Body)
	}
	if r := d.call("DELETE", "/v1/campaigns/"+id, nil, nil); r.Status != http.StatusNoContent {
		t.Errorf("DELETE the campaign: HTTP %d: %s", r.Status, r.Body)
	}
	if n := len(campaignJobs()); n != 1 {
		t.Errorf("the campaign has %d jobs, want 1", n)
	}
	if n := len(d.jobs()); n != 1 {
		t.Errorf("GET /v1/jobs lists %d jobs, want only the campaign's", n)
	}
	final := d.waitFinal(job.ID, 30*time.Second)
	lines := checkExactlyOnce(t, m.deliveries(), job.ID, rcs)
	checkCompleted(t, final, len(rcs), len(lines))
	if n := len(m.deliveries()); n != len(rcs) {
		t.Errorf("the delivery log has %d lines, want %d", n, len(rcs))
	}
}
