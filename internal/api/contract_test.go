package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/store"
)

// TestMediaTypes: JSON routes refuse bodies of other media types with a
// 415 problem that changes nothing, and take JSON however curl sends it.
func TestMediaTypes(t *testing.T) {
	s := newStack(t)
	job := s.submitJob(tokenA, "media", 2)
	jobPath := "/v1/jobs/" + job.ID
	body := `{"name": "n", "template": "Hi", "recipients": [{"account": "acct-a", "to": "u1"}]}`
	refused := []struct{ method, path, body, contentType string }{
		{"POST", "/v1/jobs", body, "text/plain"},
		{"POST", "/v1/jobs", body, "text/csv"},
		{"POST", "/v1/jobs", body, "multipart/form-data; boundary=x"},
		{"POST", "/v1/jobs", "name=n&template=Hi", "application/x-www-form-urlencoded"},
		{"POST", "/v1/jobs", body, "application/json;;"},
		{"PATCH", jobPath, `{"budget": 7}`, "text/plain; charset=utf-8"},
		{"PUT", "/v1/accounts/acct-z", `{"rate_per_sec": 1}`, "application/xml"},
		{"POST", jobPath + "/redrive", `{"category": "permanent"}`, "text/plain"},
		{"POST", jobPath + "/items/0/resolve", `{"outcome": "resend"}`, "text/plain"},
		{"PUT", "/v1/suppressions/acct-a/u1", `{"reason": "x"}`, "text/plain"},
		{"POST", "/v1/suppressions", `{"entries": [{"account": "acct-a", "to": "u1"}]}`, "text/csv"},
		{"POST", "/v1/campaigns", `{"name": "x"}`, "text/plain"},
	}
	before := s.totals()
	for _, c := range refused {
		r := s.do(c.method, c.path, tokenA, c.body, "Content-Type", c.contentType)
		p := wantProblem(t, r, http.StatusUnsupportedMediaType)
		if p.Type != "urn:qunfa:problem:unsupported-media-type" || r.header.Get("Accept") != "application/json" {
			t.Errorf("%s %s as %s: type %q, Accept %q", c.method, c.path, c.contentType, p.Type, r.header.Get("Accept"))
		}
	}
	if after := s.totals(); after != before {
		t.Errorf("refused bodies changed totals: %+v → %+v", before, after)
	}
	var j api.Job
	s.do("GET", jobPath, tokenA, nil).json(t, &j)
	if j.Budget != 0 {
		t.Errorf("a refused PATCH set the budget to %d", j.Budget)
	}
	if r := s.do("GET", "/v1/suppressions", tokenA, nil); strings.Contains(string(r.body), `"u1"`) {
		t.Errorf("a refused suppression was stored: %s", r.body)
	}

	// JSON as any client sends it: declared, with parameters, a +json
	// type, no Content-Type at all, and curl -d's default form type.
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "application/merge-patch+json", "", "application/x-www-form-urlencoded"} {
		budget := `{"budget": ` + string(rune('1'+i)) + `}`
		var hdr []string
		if ct != "" {
			hdr = []string{"Content-Type", ct}
		}
		if r := s.do("PATCH", jobPath, tokenA, budget, hdr...); r.status != http.StatusOK {
			t.Errorf("PATCH as %q: %d %s", ct, r.status, r.body)
		}
	}
	// A form-typed body that starts like JSON but is broken is a 400, as
	// for JSON.
	wantProblem(t, s.do("PATCH", jobPath, tokenA, `{"budget": `, "Content-Type", "application/x-www-form-urlencoded"), http.StatusBadRequest)
}

// TestPatchFinishedJobConflicts: limits of a job in a final status do not
// change (the spec's 409), and its used budget is not touched either.
func TestPatchFinishedJobConflicts(t *testing.T) {
	s := newStack(t)
	job := s.submitJob(tokenA, "final", 2)
	path := "/v1/jobs/" + job.ID
	if r := s.do("POST", path+"/cancel", tokenA, nil); r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	for _, body := range []string{`{"budget": 5}`, `{"rate_per_sec": 3}`, `{"rate_per_sec": 0, "budget": 0}`} {
		p := wantProblem(t, s.do("PATCH", path, tokenA, body), http.StatusConflict)
		if !strings.Contains(p.Detail, "cancelled") {
			t.Errorf("PATCH %s: detail %q does not say the job is cancelled", body, p.Detail)
		}
	}
	var j api.Job
	s.do("GET", path, tokenA, nil).json(t, &j)
	if j.Budget != 0 || j.RatePerSec != 0 || j.BudgetUsed != 0 {
		t.Errorf("refused PATCHes changed the job: budget %d used %d rate %v", j.Budget, j.BudgetUsed, j.RatePerSec)
	}
}

// TestResolveUnknownItemIsNotFound: resolving a seq the job does not have
// is a 404, not a 409 (which is for an item not under review).
func TestResolveUnknownItemIsNotFound(t *testing.T) {
	s := newStack(t)
	job := s.submitJob(tokenA, "resolve", 3)
	path := "/v1/jobs/" + job.ID + "/items/"
	wantProblem(t, s.do("POST", path+"3/resolve", tokenA, `{"outcome": "delivered"}`), http.StatusNotFound)
	wantProblem(t, s.do("POST", path+"999999/resolve", tokenA, `{"outcome": "resend"}`), http.StatusNotFound)
	// An item that exists but is pending is not under review.
	wantProblem(t, s.do("POST", path+"2/resolve", tokenA, `{"outcome": "delivered"}`), http.StatusConflict)
}

// TestBadCursorSaysOnlyThat: a cursor the store cannot read is a 400
// naming the cursor, without the store's own words.
func TestBadCursorSaysOnlyThat(t *testing.T) {
	s := newStack(t)
	job := s.submitJob(tokenA, "cursor", 2)
	for _, path := range []string{"/v1/jobs?cursor=garbage", "/v1/jobs/" + job.ID + "/items?cursor=Zm9vOjE", "/v1/suppressions?cursor=%25%25"} {
		p := wantProblem(t, s.do("GET", path, tokenA, nil), http.StatusBadRequest)
		if p.Detail != "invalid cursor" || len(p.Errors) != 1 || p.Errors[0].Field != "cursor" {
			t.Errorf("%s: detail %q, errors %+v; want \"invalid cursor\" naming the cursor", path, p.Detail, p.Errors)
		}
		if low := strings.ToLower(p.Detail + p.Errors[0].Message); strings.Contains(low, "store") || strings.Contains(low, "argument") {
			t.Errorf("%s: the problem tells store internals: %+v", path, p)
		}
	}
}

// TestRootRedirectsToDashboard: "/" is where people type; the dashboard
// is at /ui/.
func TestRootRedirectsToDashboard(t *testing.T) {
	s := newStack(t)
	req, err := http.NewRequest("GET", s.srv.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET / = %d Location %q, want 302 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	// Only the root: other unknown paths stay 404 problems.
	wantProblem(t, s.do("GET", "/nothing", tokenA, nil), http.StatusNotFound)
}

// TestMethodNotAllowedOnJob: DELETE of a job is not an operation; the
// answer is a 405 problem listing the methods the path has.
func TestMethodNotAllowedOnJob(t *testing.T) {
	s := newStack(t)
	job := s.submitJob(tokenA, "delete", 1)
	r := s.do("DELETE", "/v1/jobs/"+job.ID, tokenA, nil)
	p := wantProblem(t, r, http.StatusMethodNotAllowed)
	allow := r.header.Get("Allow")
	if !strings.Contains(allow, "GET") || !strings.Contains(allow, "PATCH") || strings.Contains(allow, "DELETE") {
		t.Errorf("Allow = %q, want GET and PATCH", allow)
	}
	if p.Type != "urn:qunfa:problem:method-not-allowed" {
		t.Errorf("type = %q", p.Type)
	}
	var j api.Job
	s.do("GET", "/v1/jobs/"+job.ID, tokenA, nil).json(t, &j)
	if j.Status == "cancelled" {
		t.Error("DELETE changed the job")
	}
}

// TestItemOutcomeFields: an item shows its ref, when it was sent and
// finished, and the provider's message id.
func TestItemOutcomeFields(t *testing.T) {
	s := newStack(t)
	r := s.do("POST", "/v1/jobs", tokenA, `{"template": "Hi", "metadata": {"order": "A-7"},
		"recipients": [{"account": "acct-a", "to": "u1", "ref": "cust-9"}, {"account": "acct-a", "to": "u2"}]}`)
	var job api.Job
	r.json(t, &job)
	if r.status != http.StatusAccepted || job.Metadata["order"] != "A-7" {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	ctx := t.Context()
	sent := s.clock.Now()
	c, err := s.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: job.ID, Index: 0, Max: 1, Now: sent, ClaimID: "c"})
	if err != nil || len(c.Items) != 1 {
		t.Fatalf("claim: %v %+v", err, c)
	}
	s.clock.Advance(3 * time.Second)
	done := s.clock.Now()
	if _, err := s.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: job.ID, Index: 0, At: done, Updates: []store.ItemUpdate{
		{Seq: c.Items[0].Seq, From: store.ItemSubmitted, ClaimID: "c", To: store.ItemConfirmed, MsgID: "wx-msg-1"},
	}}); err != nil {
		t.Fatal(err)
	}
	var items api.ItemList
	s.do("GET", "/v1/jobs/"+job.ID+"/items", tokenA, nil).json(t, &items)
	if len(items.Items) != 2 {
		t.Fatalf("items %+v", items.Items)
	}
	first, second := items.Items[0], items.Items[1]
	if first.Ref != "cust-9" || first.MsgID != "wx-msg-1" || first.SubmittedAt == nil || !first.SubmittedAt.Equal(sent) ||
		first.FinishedAt == nil || !first.FinishedAt.Equal(done) {
		t.Errorf("confirmed item: %+v", first)
	}
	if second.Ref != "" || second.MsgID != "" || second.SubmittedAt != nil || second.FinishedAt != nil {
		t.Errorf("pending item: %+v", second)
	}
}
