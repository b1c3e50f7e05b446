package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
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
