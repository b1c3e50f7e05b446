package api_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// TestQuotas: the platform operator sets a tenant's quota; over its
// recipients per UTC day a job gets 429 with Retry-After until the next
// day and nothing is stored; a replay is not counted again; over its
// running jobs a job (or a staged job's start) gets 429 until one ends.
func TestQuotas(t *testing.T) {
	s := newStack(t)
	put := func(tenant, body string) api.Quota {
		t.Helper()
		r := s.do("PUT", "/v1/tenants/"+tenant+"/quota", platformToken, body)
		if r.status != http.StatusOK {
			t.Fatalf("PUT quota: %d %s", r.status, r.body)
		}
		var q api.Quota
		r.json(t, &q)
		return q
	}
	var unset api.Quota
	s.do("GET", "/v1/tenants/tenant-a/quota", platformToken, nil).json(t, &unset)
	if unset.MaxRunningJobs != 0 || unset.MaxRecipientsPerDay != 0 || unset.UpdatedAt != nil {
		t.Fatalf("quota never set = %+v, want unlimited", unset)
	}
	if q := put("tenant-a", `{"max_running_jobs": 0, "max_recipients_per_day": 10}`); q.MaxRecipientsPerDay != 10 || q.Tenant != "tenant-a" {
		t.Fatalf("PUT quota answered %+v", q)
	}
	var got api.Quota
	s.do("GET", "/v1/tenants/tenant-a/quota", platformToken, nil).json(t, &got)
	if got.MaxRecipientsPerDay != 10 || got.UpdatedAt == nil {
		t.Fatalf("GET quota = %+v", got)
	}
	// Only the platform token sets quotas.
	wantProblem(t, s.do("PUT", "/v1/tenants/tenant-a/quota", tokenA, `{"max_running_jobs": 0, "max_recipients_per_day": 0}`), http.StatusForbidden)
	wantProblem(t, s.do("PUT", "/v1/tenants/tenant-a/quota", platformToken, `{"max_running_jobs": -1, "max_recipients_per_day": 0}`), http.StatusUnprocessableEntity)
	wantProblem(t, s.do("PUT", "/v1/tenants/tenant-a/quota", platformToken, `{"max_running_jobs": 1}`), http.StatusUnprocessableEntity)

	// Recipients per day: 4 + 7 > 10.
	first := s.submitJob(tokenA, "day-1", 4)
	before := s.totals()
	r := s.do("POST", "/v1/jobs", tokenA, jobBody(7), "Idempotency-Key", "day-2")
	p := wantProblem(t, r, http.StatusTooManyRequests)
	if len(p.Errors) != 1 || p.Errors[0].Field != "max_recipients_per_day" {
		t.Errorf("429 problem %+v does not name the quota", p)
	}
	// 09:00 UTC: the next day begins in 15 hours.
	if ra := r.header.Get("Retry-After"); ra != strconv.Itoa(15*3600) {
		t.Errorf("Retry-After = %q, want %d", ra, 15*3600)
	}
	if after := s.totals(); after != before {
		t.Errorf("a refused job changed something: %+v → %+v", before, after)
	}
	// A replay gives its recipients back: 4 + 6 still fit after it.
	if r := s.do("POST", "/v1/jobs", tokenA, jobBody(4), "Idempotency-Key", "day-1"); r.status != http.StatusAccepted ||
		r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("a replay: %d %s, want the first job again", r.status, r.body)
	}
	s.submitJob(tokenA, "day-3", 6) // exactly 10
	wantProblem(t, s.do("POST", "/v1/jobs", tokenA, jobBody(1)), http.StatusTooManyRequests)
	// Tenant B has no quota.
	s.submitJob(tokenB, "b-1", 20)
	// The next UTC day starts afresh.
	s.clock.Advance(15 * time.Hour)
	s.submitJob(tokenA, "day-4", 10)
	_ = first

	// Running jobs: starting, running and paused count; a cancelled one
	// does not.
	put("tenant-a", `{"max_running_jobs": 4, "max_recipients_per_day": 0}`) // day-1, day-3 and day-4 run
	second := s.submitJob(tokenA, "run-2", 2)
	r = s.do("POST", "/v1/jobs", tokenA, jobBody(2), "Idempotency-Key", "run-3")
	if p := wantProblem(t, r, http.StatusTooManyRequests); len(p.Errors) != 1 || p.Errors[0].Field != "max_running_jobs" {
		t.Errorf("429 problem %+v does not name the quota", p)
	}
	if ra := r.header.Get("Retry-After"); ra != "60" {
		t.Errorf("Retry-After = %q, want 60", ra)
	}
	if r := s.do("POST", "/v1/jobs/"+second.ID+"/pause", tokenA, nil); r.status != http.StatusOK {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	wantProblem(t, s.do("POST", "/v1/jobs", tokenA, jobBody(2), "Idempotency-Key", "run-3"), http.StatusTooManyRequests)
	// A staged job is not counted while staging; its start is.
	var staged api.Job
	s.do("POST", "/v1/jobs", tokenA, `{"name": "big", "template": "Hi {{name}}", "staged": true}`, "Idempotency-Key", "run-staged").json(t, &staged)
	if r := s.do("PUT", "/v1/jobs/"+staged.ID+"/recipients/1", tokenA, `{"account": "acct-a", "to": "u1", "vars": {"name": "A"}}`+"\n",
		"Content-Type", "application/x-ndjson"); r.status != http.StatusOK {
		t.Fatalf("put part: %d %s", r.status, r.body)
	}
	wantProblem(t, s.do("POST", "/v1/jobs/"+staged.ID+"/start", tokenA, `{"parts": 1}`), http.StatusTooManyRequests)
	var still api.Job
	s.do("GET", "/v1/jobs/"+staged.ID, tokenA, nil).json(t, &still)
	if still.Status != "staging" {
		t.Errorf("a start refused by the quota left the job %s", still.Status)
	}
	if r := s.do("POST", "/v1/jobs/"+second.ID+"/cancel", tokenA, nil); r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	if r := s.do("POST", "/v1/jobs/"+staged.ID+"/start", tokenA, `{"parts": 1}`); r.status != http.StatusAccepted {
		t.Fatalf("start after a job ended: %d %s", r.status, r.body)
	}
}
