package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// TestIdempotentSubmission posts one body with one Idempotency-Key from ten
// goroutines at once: one job comes out of it (every answer 202 with the
// same id, all but the first with Idempotent-Replayed: true); the key with
// another body is refused with 409;
// the job list holds one job, and the job is delivered once.
func TestIdempotentSubmission(t *testing.T) {
	t.Parallel()
	m := startMock(t)
	d := startDev(t, m, devOptions{})
	d.putAccount("idem-a", map[string]any{"rate_per_sec": 1000})
	rcs := recipientsFor("idem-a", 40)
	body := mustJSON(t, jobRequest{Name: "idempotent", Template: testTemplate, Recipients: rcs})
	const key = "campaign-2026-12-12"

	type answer struct {
		status   int
		replayed bool
		ctype    string
		job      api.Job
		err      error
	}
	const n = 10
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			h := authHeader()
			h.Set("Idempotency-Key", key)
			r, err := send(context.Background(), "POST", d.URL+"/v1/jobs", h, body)
			a := answer{status: r.Status, replayed: r.Header.Get("Idempotent-Replayed") == "true", ctype: r.Header.Get("Content-Type"), err: err}
			if err == nil && r.Status == http.StatusAccepted {
				a.err = json.Unmarshal(r.Body, &a.job)
			} else if err == nil {
				a.err = &api.Problem{Status: r.Status, Detail: string(r.Body)}
			}
			answers[i] = a
		}()
	}
	close(start)
	wg.Wait()

	ids := map[string]int{}
	statuses := map[int]int{}
	for i, a := range answers {
		if a.err != nil {
			t.Errorf("submission %d: HTTP %d: %v", i, a.status, a.err)
			continue
		}
		if a.replayed {
			statuses[-a.status]++ // a replay
		} else {
			statuses[a.status]++
		}
		ids[a.job.ID]++
		if !strings.HasPrefix(a.ctype, "application/json") {
			t.Errorf("submission %d: Content-Type %q", i, a.ctype)
		}
		if a.job.Total != int64(len(rcs)) {
			t.Errorf("submission %d: total %d, want %d", i, a.job.Total, len(rcs))
		}
	}
	t.Logf("10 concurrent submissions: statuses %v, job ids %v", statuses, ids)
	if len(ids) != 1 {
		t.Fatalf("the same key and body gave %d jobs: %v (DESIGN rule 7)", len(ids), ids)
	}
	if statuses[http.StatusAccepted] != 1 || statuses[-http.StatusAccepted] != n-1 {
		t.Errorf("statuses %v (negative: replays), want one 202 (created) and %d × 202 replayed (the same job)", statuses, n-1)
	}
	var jobID string
	for id := range ids {
		jobID = id
	}

	// The same key with another body is refused, and changes nothing.
	other := mustJSON(t, jobRequest{Name: "idempotent", Template: testTemplate, Recipients: rcs[:len(rcs)-1]})
	r := d.call("POST", "/v1/jobs", http.Header{"Idempotency-Key": {key}}, other)
	checkProblem(t, "same key, other body", r, http.StatusConflict)

	final := d.waitFinal(jobID, 30*time.Second)
	lines := checkExactlyOnce(t, m.deliveries(), jobID, rcs)
	checkCompleted(t, final, len(rcs), len(lines))

	// A repeat after the job finished still names the same job.
	var again api.Job
	rep := d.call("POST", "/v1/jobs", http.Header{"Idempotency-Key": {key}}, body)
	if rep.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a repeat after completion: Idempotent-Replayed = %q, want true", rep.Header.Get("Idempotent-Replayed"))
	}
	d.decode(rep, http.StatusAccepted, &again)
	if again.ID != jobID {
		t.Errorf("a repeat after completion gave job %s, want %s", again.ID, jobID)
	}
	jobs := d.jobs()
	if len(jobs) != 1 || jobs[0].ID != jobID {
		t.Errorf("GET /v1/jobs lists %d jobs, want only %s", len(jobs), jobID)
	}
	if n := len(m.deliveries()); n != len(rcs) {
		t.Errorf("the delivery log has %d lines, want %d", n, len(rcs))
	}
}
