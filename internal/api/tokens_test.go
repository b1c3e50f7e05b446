package api_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/store"
)

// TestTokenRolesRevocationAndExpiry: an admin creates tokens of each role;
// a read token reads and is refused every change (403, nothing changed);
// an operate token runs jobs but not accounts or tokens; a revoked token
// fails at its next call, an expired one once its time is up. Secrets are
// shown once and never listed.
func TestTokenRolesRevocationAndExpiry(t *testing.T) {
	s := newStack(t)
	create := func(body string) api.NewTokenAnswer {
		t.Helper()
		r := s.do("POST", "/v1/tokens", tokenA, body)
		if r.status != http.StatusCreated {
			t.Fatalf("create token: %d %s", r.status, r.body)
		}
		var nt api.NewTokenAnswer
		r.json(t, &nt)
		if !strings.HasPrefix(nt.Secret, "qf_") || nt.ID == "" {
			t.Fatalf("new token %+v", nt)
		}
		return nt
	}
	reader := create(`{"name": "dashboard", "role": "read"}`)
	operator := create(`{"name": "crm", "role": "operate"}`)
	soon := s.clock.Now().Add(time.Hour).Format(time.RFC3339)
	temp := create(`{"name": "temp", "role": "admin", "expires_at": "` + soon + `"}`)

	before := s.totals()
	if r := s.do("GET", "/v1/jobs", reader.Secret, nil); r.status != http.StatusOK {
		t.Fatalf("read token GET /v1/jobs: %d", r.status)
	}
	for _, call := range []struct{ method, path string }{
		{"POST", "/v1/jobs"}, {"PUT", "/v1/accounts/acct-a"}, {"POST", "/v1/tokens"}, {"GET", "/v1/tokens"}, {"POST", "/v1/suppressions"},
	} {
		var body any = `{"rate_per_sec": 1, "name": "x", "role": "admin", "entries": []}`
		if call.path == "/v1/jobs" {
			body = jobBody(2)
		}
		p := wantProblem(t, s.do(call.method, call.path, reader.Secret, body), http.StatusForbidden)
		if !strings.Contains(p.Detail, "read") {
			t.Errorf("%s %s: detail %q does not name the role", call.method, call.path, p.Detail)
		}
	}
	if after := s.totals(); after != before {
		t.Errorf("refused calls changed something: %+v → %+v", before, after)
	}
	// Operate: jobs yes, accounts and tokens no.
	s.submitJob(operator.Secret, "op-1", 2)
	wantProblem(t, s.do("PUT", "/v1/accounts/acct-a", operator.Secret, `{"rate_per_sec": 1}`), http.StatusForbidden)
	wantProblem(t, s.do("POST", "/v1/tokens", operator.Secret, `{"name": "x", "role": "admin"}`), http.StatusForbidden)

	// Listed without secrets.
	r := s.do("GET", "/v1/tokens", tokenA, nil)
	if r.status != http.StatusOK || strings.Contains(string(r.body), reader.Secret) || strings.Contains(string(r.body), `"token"`) {
		t.Fatalf("GET /v1/tokens: %d %s", r.status, r.body)
	}
	var list api.TokenList
	r.json(t, &list)
	if len(list.Tokens) != 5 { // provisioned admin, the harness's reader, and three here
		t.Errorf("GET /v1/tokens lists %d tokens: %+v", len(list.Tokens), list.Tokens)
	}
	// Another tenant cannot see or revoke them.
	var listB api.TokenList
	s.do("GET", "/v1/tokens", tokenB, nil).json(t, &listB)
	if len(listB.Tokens) != 1 {
		t.Errorf("tenant B lists %+v", listB.Tokens)
	}
	wantProblem(t, s.do("DELETE", "/v1/tokens/"+reader.ID, tokenB, nil), http.StatusNotFound)

	// Revocation takes effect on the next call.
	if r := s.do("DELETE", "/v1/tokens/"+reader.ID, tokenA, nil); r.status != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	wantProblem(t, s.do("GET", "/v1/jobs", reader.Secret, nil), http.StatusUnauthorized)

	// Expiry: works until its time, then 401.
	if r := s.do("GET", "/v1/tokens", temp.Secret, nil); r.status != http.StatusOK {
		t.Fatalf("temp token before expiry: %d", r.status)
	}
	s.clock.Advance(time.Hour)
	p := wantProblem(t, s.do("GET", "/v1/jobs", temp.Secret, nil), http.StatusUnauthorized)
	if !strings.Contains(p.Detail, "expired") {
		t.Errorf("expired token detail %q", p.Detail)
	}
	// Bad requests create nothing.
	for _, body := range []string{`{"name": "", "role": "read"}`, `{"name": "x", "role": "root"}`,
		`{"name": "x", "role": "read", "expires_at": "2000-01-01T00:00:00Z"}`} {
		wantProblem(t, s.do("POST", "/v1/tokens", tokenA, body), http.StatusUnprocessableEntity)
	}
	var after api.TokenList
	s.do("GET", "/v1/tokens", tokenA, nil).json(t, &after)
	if len(after.Tokens) != 4 {
		t.Errorf("after revoking one and refusing three: %d tokens", len(after.Tokens))
	}
}

// TestProviderAccountsHaveOneOwner: a tenant cannot configure or send
// through another tenant's provider account; an account nobody owns is
// granted by the platform operator (or, with GrantOnPut, to the first
// tenant that PUTs it); only the platform token grants.
func TestProviderAccountsHaveOneOwner(t *testing.T) {
	s := newStack(t, withoutGrantOnPut)
	ctx := context.Background()
	// Tenant B tries tenant A's account: refused, nothing stored.
	wantProblem(t, s.do("PUT", "/v1/accounts/acct-a", tokenB, `{"rate_per_sec": 1000}`), http.StatusForbidden)
	if _, err := s.store.GetAccount(ctx, "tenant-b", "acct-a"); err == nil {
		t.Fatal("tenant B's config of tenant A's account was stored")
	}
	if a, _ := s.store.GetAccount(ctx, "tenant-a", "acct-a"); a.RatePerSec != 10 {
		t.Fatalf("tenant A's account changed: %+v", a)
	}
	p := wantProblem(t, s.do("POST", "/v1/jobs", tokenB, jobBody(2)), http.StatusUnprocessableEntity)
	if !strings.Contains(p.Error(), "acct-a") {
		t.Errorf("422 does not name the account: %+v", p)
	}
	// An account nobody owns: not without a grant.
	wantProblem(t, s.do("PUT", "/v1/accounts/acct-new", tokenA, `{"rate_per_sec": 5}`), http.StatusForbidden)
	// Only the platform token grants.
	wantProblem(t, s.do("PUT", "/v1/tenants/tenant-a/accounts/acct-new", tokenA, nil), http.StatusForbidden)
	wantProblem(t, s.do("PUT", "/v1/tenants/tenant-a/accounts/acct-new", "", nil), http.StatusUnauthorized)
	if r := s.do("PUT", "/v1/tenants/tenant-a/accounts/acct-new", platformToken, nil); r.status != http.StatusOK {
		t.Fatalf("grant: %d %s", r.status, r.body)
	}
	wantProblem(t, s.do("PUT", "/v1/tenants/tenant-b/accounts/acct-new", platformToken, nil), http.StatusConflict)
	if r := s.do("PUT", "/v1/accounts/acct-new", tokenA, `{"rate_per_sec": 5}`); r.status != http.StatusOK {
		t.Fatalf("PUT a granted account: %d %s", r.status, r.body)
	}
	// The platform creates a new tenant's first token; it works at once.
	r := s.do("POST", "/v1/tenants/tenant-c/tokens", platformToken, `{"name": "first", "role": "admin"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("first token: %d %s", r.status, r.body)
	}
	var first api.NewTokenAnswer
	r.json(t, &first)
	if r := s.do("GET", "/v1/tokens", first.Secret, nil); r.status != http.StatusOK {
		t.Fatalf("tenant C's first token: %d %s", r.status, r.body)
	}
	// With GrantOnPut (qunfa dev) the first tenant to PUT an unowned
	// account gets it, and nobody else.
	dev := newStack(t)
	if r := dev.do("PUT", "/v1/accounts/acct-z", tokenB, `{"rate_per_sec": 5}`); r.status != http.StatusOK {
		t.Fatalf("grant on put: %d %s", r.status, r.body)
	}
	wantProblem(t, dev.do("PUT", "/v1/accounts/acct-z", tokenA, `{"rate_per_sec": 5}`), http.StatusForbidden)
	if owner, err := dev.store.AccountOwner(ctx, "acct-z"); err != nil || owner != "tenant-b" {
		t.Fatalf("owner of acct-z = %q, %v", owner, err)
	}
}

// TestAuditLog: every state-changing call that succeeded is recorded with
// who made it, the route and the job or account it touched; reads and
// refused calls are not; the log is the tenant's own and admin-only.
func TestAuditLog(t *testing.T) {
	s := newStack(t)
	r := s.do("POST", "/v1/tokens", tokenA, `{"name": "crm", "role": "operate"}`)
	var op api.NewTokenAnswer
	r.json(t, &op)
	j := s.submitJob(op.Secret, "audit-1", 2)
	if r := s.do("POST", "/v1/jobs/"+j.ID+"/pause", op.Secret, nil); r.status != http.StatusOK {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	s.do("GET", "/v1/jobs/"+j.ID, op.Secret, nil)
	wantProblem(t, s.do("PUT", "/v1/accounts/acct-a", op.Secret, `{"rate_per_sec": 1}`), http.StatusForbidden)
	wantProblem(t, s.do("POST", "/v1/jobs/"+j.ID+"/pause", op.Secret, nil), http.StatusConflict)
	if r := s.do("PUT", "/v1/accounts/acct-a", tokenA, `{"rate_per_sec": 5}`); r.status != http.StatusOK {
		t.Fatalf("put account: %d", r.status)
	}
	var log api.AuditList
	s.do("GET", "/v1/audit", tokenA, nil).json(t, &log)
	var got []string
	for _, e := range log.Entries {
		got = append(got, e.TokenName+" "+e.Route)
	}
	want := []string{"provisioned PUT /v1/accounts/{account}", "crm POST /v1/jobs/{id}/pause", "crm POST /v1/jobs", "provisioned POST /v1/tokens"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("audit log, newest first:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if e := log.Entries[1]; e.JobID == nil || *e.JobID != j.ID || e.Role != "operate" || e.Status != http.StatusOK {
		t.Errorf("pause entry %+v", e)
	}
	if e := log.Entries[2]; e.JobID == nil || *e.JobID != j.ID || e.Status != http.StatusAccepted {
		t.Errorf("submit entry %+v (the created job comes from its Location)", e)
	}
	if e := log.Entries[0]; e.Account == nil || *e.Account != "acct-a" {
		t.Errorf("account entry %+v", e)
	}
	var ofJob api.AuditList
	s.do("GET", "/v1/audit?job="+j.ID, tokenA, nil).json(t, &ofJob)
	if len(ofJob.Entries) != 2 {
		t.Errorf("audit of the job: %+v", ofJob.Entries)
	}
	wantProblem(t, s.do("GET", "/v1/audit", op.Secret, nil), http.StatusForbidden)
	var other api.AuditList
	s.do("GET", "/v1/audit", tokenB, nil).json(t, &other)
	if len(other.Entries) != 0 {
		t.Errorf("tenant B sees %+v", other.Entries)
	}
}

// TestOperateRoleRunsJobsButNotAccountsOrTokens: an operate token may do
// everything DESIGN.md gives that role — jobs and every job command
// (submit, preview, staged parts and start, pause, resume, cancel, limits,
// redrive, resolve), suppressions and campaigns — and gets a 403 problem,
// changing nothing, for what is the admin's alone: accounts and tokens.
func TestOperateRoleRunsJobsButNotAccountsOrTokens(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	r := s.do("POST", "/v1/tokens", tokenA, `{"name": "crm", "role": "operate"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("create operate token: %d %s", r.status, r.body)
	}
	var op api.NewTokenAnswer
	r.json(t, &op)

	// A job of the operator's with a failed item (to redrive) and an item
	// under review (to resolve), set as a sender would leave them.
	job := s.submitJob(op.Secret, "op-job", 4)
	jobPath := "/v1/jobs/" + job.ID
	claim, err := s.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: job.ID, Index: 0, Max: 2, Now: s.clock.Now(), ClaimID: "op"})
	if err != nil || len(claim.Items) != 2 {
		t.Fatalf("claim: %v (%d items)", err, len(claim.Items))
	}
	failed, review := claim.Items[0].Seq, claim.Items[1].Seq
	if res, err := s.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: job.ID, Index: 0, At: s.clock.Now(), Updates: []store.ItemUpdate{
		{Seq: failed, From: store.ItemSubmitted, ClaimID: "op", To: store.ItemFailed,
			Error: &store.ItemError{Category: store.CategoryPermanent, Code: "81013", Message: "invalid recipient"}},
		{Seq: review, From: store.ItemSubmitted, ClaimID: "op", To: store.ItemSubmitted,
			Error: &store.ItemError{Category: store.CategoryUncertain, Message: "no answer"}},
	}}); err != nil || len(res.Rejected) > 0 {
		t.Fatalf("fail one item, put one under review: %v %+v", err, res)
	}
	if _, err := s.store.RecountShard(ctx, job.ID, 0); err != nil {
		t.Fatal(err)
	}
	var staged api.Job
	r = s.do("POST", "/v1/jobs", op.Secret, stagedBody, "Idempotency-Key", "op-staged")
	if r.status != http.StatusCreated {
		t.Fatalf("operator's staged job: %d %s", r.status, r.body)
	}
	r.json(t, &staged)
	var discarded api.Job
	s.do("POST", "/v1/jobs", op.Secret, stagedBody, "Idempotency-Key", "op-discarded").json(t, &discarded)
	stagedPath := "/v1/jobs/" + staged.ID
	campaign := `{"id": "weekly", "name": "Weekly", "schedule": "cron(0 9 ? * MON *)", "mode": "snapshot",
		"request": {"template": "Hi {{name}}", "recipients": [{"account": "acct-a", "to": "u1", "vars": {"name": "Li"}}]}}`

	for _, c := range []struct {
		method, path string
		body         any
		contentType  string
		want         int
		has          string // in the answer, when given
	}{
		{"POST", "/v1/jobs/preview", jobBody(4), "", http.StatusOK, ""},
		{"POST", "/v1/jobs", jobBody(2), "", http.StatusAccepted, ""},
		{"POST", jobPath + "/pause", nil, "", http.StatusOK, ""},
		{"POST", jobPath + "/resume", nil, "", http.StatusOK, ""},
		{"PATCH", jobPath, `{"rate_per_sec": 2, "budget": 100}`, "", http.StatusOK, ""},
		{"POST", jobPath + "/redrive", `{"category": "permanent"}`, "", http.StatusOK, `"redriven":1`},
		{"POST", jobPath + "/items/" + strconv.FormatInt(review, 10) + "/resolve", `{"outcome": "delivered"}`, "", http.StatusOK, `"status":"confirmed"`},
		{"POST", jobPath + "/cancel", nil, "", http.StatusOK, ""},
		{"PUT", stagedPath + "/recipients/1", ndjsonPart, "application/x-ndjson", http.StatusOK, ""},
		{"GET", stagedPath + "/recipients", nil, "", http.StatusOK, ""},
		{"POST", stagedPath + "/preview", nil, "", http.StatusOK, ""},
		{"POST", stagedPath + "/start", `{"parts": 1}`, "", http.StatusAccepted, ""},
		{"POST", "/v1/jobs/" + discarded.ID + "/cancel", nil, "", http.StatusOK, ""},
		{"PUT", "/v1/suppressions/acct-a/blocked-1", `{"reason": "unsubscribed"}`, "", http.StatusOK, ""},
		{"POST", "/v1/suppressions", `{"entries": [{"account": "acct-b", "to": "blocked-2"}]}`, "", http.StatusOK, ""},
		{"GET", "/v1/suppressions", nil, "", http.StatusOK, ""},
		{"DELETE", "/v1/suppressions/acct-a/blocked-1", nil, "", http.StatusNoContent, ""},
		{"POST", "/v1/campaigns", campaign, "", http.StatusCreated, ""},
		{"GET", "/v1/campaigns", nil, "", http.StatusOK, ""},
		{"GET", "/v1/campaigns/weekly", nil, "", http.StatusOK, ""},
		{"DELETE", "/v1/campaigns/weekly", nil, "", http.StatusNoContent, ""},
	} {
		var headers []string
		if c.contentType != "" {
			headers = []string{"Content-Type", c.contentType}
		}
		if r := s.do(c.method, c.path, op.Secret, c.body, headers...); r.status != c.want || !strings.Contains(string(r.body), c.has) {
			t.Errorf("operate %s %s: %d, want %d %s; %s", c.method, c.path, r.status, c.want, c.has, r.body)
		}
	}
	// What the commands did, read back with the admin's token.
	var after api.Job
	s.do("GET", jobPath, tokenA, nil).json(t, &after)
	if after.Status != "cancelled" || after.RatePerSec != 2 || after.Budget != 100 {
		t.Errorf("the operator's job after its commands: %s, rate %v, budget %d", after.Status, after.RatePerSec, after.Budget)
	}
	var sup api.SuppressionList
	s.do("GET", "/v1/suppressions", tokenA, nil).json(t, &sup)
	if len(sup.Suppressions) != 1 || sup.Suppressions[0].To != "blocked-2" {
		t.Errorf("suppressions after the operator's changes: %+v", sup.Suppressions)
	}

	// The admin's alone: accounts and tokens.
	var tokensBefore api.TokenList
	s.do("GET", "/v1/tokens", tokenA, nil).json(t, &tokensBefore)
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/v1/accounts/acct-a", `{"rate_per_sec": 1000}`},
		{"PUT", "/v1/accounts/acct-unowned", `{"rate_per_sec": 5}`},
		{"POST", "/v1/tokens", `{"name": "escalate", "role": "admin"}`},
		{"GET", "/v1/tokens", ""},
		{"DELETE", "/v1/tokens/" + op.ID, ""},
		{"DELETE", "/v1/tokens/tok_read", ""},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			var body any
			if c.body != "" {
				body = c.body
			}
			p := wantProblem(t, s.do(c.method, c.path, op.Secret, body), http.StatusForbidden)
			if !strings.Contains(p.Detail, "admin") {
				t.Errorf("403 detail %q does not name the role needed", p.Detail)
			}
		})
	}
	if a, err := s.store.GetAccount(ctx, "tenant-a", "acct-a"); err != nil || a.RatePerSec != 10 {
		t.Errorf("acct-a after the operator's refused PUT: %+v, %v", a, err)
	}
	if owner, err := s.store.AccountOwner(ctx, "acct-unowned"); err == nil {
		t.Errorf("the operator's refused PUT granted acct-unowned to %q", owner)
	}
	var tokensAfter api.TokenList
	s.do("GET", "/v1/tokens", tokenA, nil).json(t, &tokensAfter)
	if len(tokensAfter.Tokens) != len(tokensBefore.Tokens) {
		t.Errorf("tokens after the operator's refused calls: %d, before %d", len(tokensAfter.Tokens), len(tokensBefore.Tokens))
	}
	if r := s.do("GET", "/v1/jobs", op.Secret, nil); r.status != http.StatusOK {
		t.Errorf("the operate token stopped working after its refused DELETE: %d", r.status)
	}
}
