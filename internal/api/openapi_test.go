package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/provider/wxcrypt"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/api/apispec"
	"github.com/qunfa/qunfa/internal/breaker"
	"github.com/qunfa/qunfa/internal/provider/accesstoken"
	"github.com/qunfa/qunfa/internal/store"
)

// TestOpenAPISpecIsValid loads the served description with kin-openapi and
// validates it as an OpenAPI 3.1 document.
func TestOpenAPISpecIsValid(t *testing.T) {
	doc, err := apispec.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !doc.IsOpenAPI31OrLater() || !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Errorf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	if s := doc.Components.SecuritySchemes["bearer"]; s == nil || s.Value.Type != "http" || s.Value.Scheme != "bearer" {
		t.Errorf("no http bearer security scheme: %+v", doc.Components.SecuritySchemes)
	}
	if len(doc.Security) != 1 {
		t.Errorf("the description does not require the bearer token by default: %+v", doc.Security)
	}
	post := doc.Paths.Find("/v1/jobs").Post
	if p := post.Parameters.GetByInAndName("header", "Idempotency-Key"); p == nil {
		t.Error("POST /v1/jobs does not describe the Idempotency-Key header")
	}
}

// TestOpenAPIDescribesEveryRoute compares the router's patterns with the
// description's operations, both ways.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	doc, err := apispec.Load()
	if err != nil {
		t.Fatal(err)
	}
	var described []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			described = append(described, method+" "+path)
		}
	}
	routes := api.Routes()
	if len(routes) == 0 {
		t.Fatal("api.Routes() is empty")
	}
	for _, r := range routes {
		if !slices.Contains(described, r) {
			t.Errorf("the router serves %q but internal/api/openapi.json does not describe it: add the operation, its parameters and every response it gives", r)
		}
	}
	for _, d := range described {
		if !slices.Contains(routes, d) {
			t.Errorf("internal/api/openapi.json describes %q but the router does not serve it", d)
		}
	}
	public := map[string]bool{}
	for _, d := range described {
		method, path, _ := strings.Cut(d, " ")
		op := doc.Paths.Find(path).GetOperation(method)
		public[d] = op.Security != nil && len(*op.Security) == 0
	}
	for d, open := range public {
		want := d == "GET /healthz" || d == "GET /v1/openapi.json" || d == "GET /v1/openapi-3.0.json" ||
			strings.Contains(d, " /v1/callbacks/") // signed by the provider instead
		if open != want {
			t.Errorf("%s: described as needing no token = %v, want %v", d, open, want)
		}
	}
}

// TestOpenAPIServed checks GET /v1/openapi.json: no token, the embedded
// document byte for byte.
func TestOpenAPIServed(t *testing.T) {
	s := newStack(t)
	r := s.do("GET", "/v1/openapi.json", "", nil)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: %d %s", r.status, r.header.Get("Content-Type"))
	}
	if !bytes.Equal(r.body, api.OpenAPISpec()) {
		t.Error("the served description differs from api.OpenAPISpec()")
	}
	var doc map[string]any
	r.json(t, &doc)
	if doc["openapi"] != "3.1.0" {
		t.Errorf("openapi = %v", doc["openapi"])
	}
}

// specCall is one request of the conformance run.
type specCall struct {
	method, path, token string
	body                any
	headers             []string
	want                int
}

// conformance sends calls and validates every answer against the
// description, recording which operation answered which status.
type conformance struct {
	t    *testing.T
	seen map[string]bool // "METHOD /template STATUS"
}

func (c *conformance) run(s *stack, calls ...specCall) []response {
	c.t.Helper()
	out := make([]response, 0, len(calls))
	for _, call := range calls {
		r := s.do(call.method, call.path, call.token, call.body, call.headers...)
		name := call.method + " " + call.path
		if r.status != call.want {
			c.t.Errorf("%s: status %d, want %d; body %s", name, r.status, call.want, r.body)
		}
		req := httptest.NewRequest(call.method, call.path, nil)
		for i := 0; i+1 < len(call.headers); i += 2 {
			req.Header.Set(call.headers[i], call.headers[i+1])
		}
		resp := &http.Response{StatusCode: r.status, Header: r.header, Body: io.NopCloser(bytes.NewReader(r.body)), Request: req}
		apispec.ValidateAgainstSpec(c.t, req, resp)
		apispec.ValidateAgainstSpec30(c.t, req, resp)
		c.seen[operationOf(call.method, call.path)+" "+fmt.Sprint(r.status)] = true
		out = append(out, r)
	}
	return out
}

// operationOf maps a concrete path to the route template it matches.
func operationOf(method, path string) string {
	path, _, _ = strings.Cut(path, "?")
	parts := strings.Split(path, "/")
	for _, route := range api.Routes() {
		m, tmpl, _ := strings.Cut(route, " ")
		tparts := strings.Split(tmpl, "/")
		if m != method || len(tparts) != len(parts) {
			continue
		}
		match := true
		for i := range tparts {
			if !strings.HasPrefix(tparts[i], "{") && tparts[i] != parts[i] {
				match = false
				break
			}
		}
		if match {
			return route
		}
	}
	return method + " " + path
}

// TestOpenAPIConformance drives every route of the real handler (embedded
// store and queue), success and error answers alike, and validates each
// answer against the description. It then checks that every documented
// answer was seen, but for those a healthy test stack cannot provoke.
func TestOpenAPIConformance(t *testing.T) {
	s := newStack(t)
	c := &conformance{t: t, seen: map[string]bool{}}
	ctx := context.Background()

	// Meta.
	c.run(s,
		specCall{method: "GET", path: "/healthz", want: 200},
		specCall{method: "GET", path: "/v1/openapi.json", want: 200},
		specCall{method: "GET", path: "/v1/openapi-3.0.json", want: 200},
	)

	// Provider callbacks: signed by the provider, no token.
	cb := newStack(t, func(d *api.Deps) {
		d.Events = &eventsRecorder{}
		d.WechatCallbacks = api.CallbackSecrets{Token: accesstoken.Lookup{Tenants: tenantTokens{"tenant-a": "tok-a", "tenant-b": failToken}}}
	})
	wc := newStack(t, func(d *api.Deps) {
		d.Events = &eventsRecorder{}
		d.WecomCallbacks = api.CallbackSecrets{
			Token:  accesstoken.Lookup{Tenants: tenantTokens{"tenant-a": "tok-a", "tenant-b": failToken}},
			AESKey: accesstoken.Lookup{Tenants: tenantTokens{"tenant-a": aesKeyA}},
		}
	})
	wcA, wcB := "/v1/callbacks/wecom-app/acct-a", "/v1/callbacks/wecom-app/"+tenantBAccounts[0]
	wecomQ, wecomBody := encrypted(t, "tok-a", aesKeyA, "acct-a", []byte("<xml><MsgType>event</MsgType><Event>enter_agent</Event></xml>"), nil)
	echoQ := func(token string) string {
		q, _ := url.ParseQuery(wecomQ[1:])
		cr, _ := wxcrypt.New(token, aesKeyA, "acct-a")
		enc, _ := cr.Encrypt([]byte("echo-1"), [16]byte{})
		q.Set("echostr", enc)
		q.Set("msg_signature", cr.Sign(q.Get("timestamp"), q.Get("nonce"), enc))
		return "?" + q.Encode()
	}
	c.run(wc,
		specCall{method: "GET", path: wcA + echoQ("tok-a"), want: 200},
		specCall{method: "GET", path: wcA + echoQ("tok-x"), want: 403},
		specCall{method: "GET", path: wcB + echoQ("tok-a"), want: 503},
		specCall{method: "POST", path: wcA + wecomQ, body: wecomBody, headers: []string{"Content-Type", "text/xml"}, want: 200},
		specCall{method: "POST", path: wcA + wecomQ, body: "<xml", headers: []string{"Content-Type", "text/xml"}, want: 400},
		specCall{method: "POST", path: wcA + "?timestamp=1&nonce=2", body: wecomBody, headers: []string{"Content-Type", "text/xml"}, want: 403},
		specCall{method: "POST", path: wcA + wecomQ, body: strings.Repeat("x", 70<<10), headers: []string{"Content-Type", "text/xml"}, want: 413},
		specCall{method: "POST", path: wcB + wecomQ, body: wecomBody, headers: []string{"Content-Type", "text/xml"}, want: 503},
	)
	cbA, cbB := "/v1/callbacks/wechat-mp/acct-a", "/v1/callbacks/wechat-mp/"+tenantBAccounts[0]
	xmlBody := []string{"Content-Type", "text/xml"}
	c.run(cb,
		specCall{method: "GET", path: cbA + signedQuery("tok-a", "e1"), want: 200},
		specCall{method: "GET", path: cbA + signedQuery("tok-x", "e1"), want: 403},
		specCall{method: "GET", path: cbB + signedQuery("tok-b", "e1"), want: 503},
		specCall{method: "POST", path: cbA + signedQuery("tok-a", ""), body: massEvent(t, "77", "send success", 2, 0), headers: xmlBody, want: 200},
		specCall{method: "POST", path: cbA + signedQuery("tok-a", ""), body: "<xml", headers: xmlBody, want: 400},
		specCall{method: "POST", path: cbA + signedQuery("tok-x", ""), body: "<xml/>", headers: xmlBody, want: 403},
		specCall{method: "POST", path: cbA + signedQuery("tok-a", ""), body: strings.Repeat("x", 70<<10), headers: xmlBody, want: 413},
		specCall{method: "POST", path: cbB + signedQuery("tok-b", ""), body: "<xml/>", headers: xmlBody, want: 503},
	)

	// Accounts.
	c.run(s,
		specCall{method: "PUT", path: "/v1/accounts/acct-c", token: tokenA, want: 200,
			body: `{"rate_per_sec": 10, "burst": 10, "online_reserve_per_sec": 2, "max_recipients_per_call": 1,
			"breaker": {"consecutive_failures": 20, "failure_rate": 0.5, "min_samples": 50, "cooldown_sec": 60}}`},
		specCall{method: "PUT", path: "/v1/accounts/acct-d", token: tokenA, body: `{"rate_per_sec": 0.5}`, want: 200},
		specCall{method: "PUT", path: "/v1/accounts/acct-c", token: tokenA, body: `{"rate_per_sec": "fast"}`, want: 400},
		specCall{method: "PUT", path: "/v1/accounts/acct-c", token: tokenA, body: `{"rate": 1}`, want: 400},
		specCall{method: "PUT", path: "/v1/accounts/acct-c", token: tokenA, body: ``, want: 400},
		specCall{method: "PUT", path: "/v1/accounts/acct-c", token: tokenA, body: `{"rate_per_sec": -1, "burst": 0}`, want: 422},
		specCall{method: "PUT", path: "/v1/accounts/acct-c", token: tokenA, body: `{"rate_per_sec": 5, "online_reserve_per_sec": 5}`, want: 422},
		specCall{method: "GET", path: "/v1/accounts/acct-c", token: tokenA, want: 200},
		specCall{method: "GET", path: "/v1/accounts/acct-c", token: tokenB, want: 404},
		specCall{method: "GET", path: "/v1/accounts/nope", token: tokenA, want: 404},
		specCall{method: "GET", path: "/v1/accounts", token: tokenA, want: 200},
	)

	// Submission.
	body := jobBody(4)
	other := jobBody(5)
	c.run(s,
		specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: body, headers: []string{"Idempotency-Key", "spec-1"}, want: 202},
		specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: body, headers: []string{"Idempotency-Key", "spec-1"}, want: 202},
		specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: other, headers: []string{"Idempotency-Key", "spec-1"}, want: 409},
		specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: body, headers: []string{"Idempotency-Key", strings.Repeat("k", 256)}, want: 400},
		specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: `{"template": "Hi", "recipients": [`, want: 400},
		specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: `{"template": "Hi {{name}}", "recipients": [{"account": "ghost", "to": "u1"}]}`, want: 422},
		specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: `{"template": "", "recipients": []}`, want: 422},
		specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: `{"template": "Hi", "canary": {"count": 1, "percent": 5}, "recipients": [{"account": "acct-a", "to": "u1"}]}`, want: 422},
		specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: `{"template": "Hi", "canary": {"count": 1}, "recipients": [{"account": "acct-a", "to": "u1"}, {"account": "acct-b", "to": "u2"}]}`, want: 202},
		specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: jobBody(2), want: 202},
	)
	// Staged submission: a job in parts.
	var staged api.Job
	c.run(s, specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: `{"name": "big", "template": "Hi {{name}}", "staged": true}`,
		headers: []string{"Idempotency-Key", "spec-staged"}, want: 201})[0].json(t, &staged)
	if staged.Status != "staging" {
		t.Fatalf("staged job status %q", staged.Status)
	}
	parts := "/v1/jobs/" + staged.ID + "/recipients/"
	nd := `{"account": "acct-a", "to": "u1", "vars": {"name": "A"}}` + "\n" + `{"account": "acct-b", "to": "u2", "vars": {"name": "B"}}` + "\n"
	c.run(s,
		specCall{method: "PUT", path: parts + "1", token: tokenA, body: nd, headers: []string{"Content-Type", "application/x-ndjson"}, want: 200},
		specCall{method: "PUT", path: parts + "1", token: tokenA, body: nd, headers: []string{"Content-Type", "application/x-ndjson"}, want: 200},
		specCall{method: "PUT", path: parts + "1", token: tokenA, body: "account,to,var.name\nacct-a,u1,A\n", headers: []string{"Content-Type", "text/csv"}, want: 409},
		specCall{method: "PUT", path: parts + "2", token: tokenA, body: `{"recipients": [{"account": "acct-a", "to": "u3", "vars": {"name": "C"}}]}`,
			headers: []string{"Content-Type", "application/json"}, want: 200},
		specCall{method: "PUT", path: parts + "3", token: tokenA, body: "account,to\nacct-a,u9\n", headers: []string{"Content-Type", "text/csv"}, want: 422},
		specCall{method: "PUT", path: parts + "0", token: tokenA, body: nd, headers: []string{"Content-Type", "application/x-ndjson"}, want: 400},
		specCall{method: "PUT", path: parts + "3", token: tokenA, body: nd, headers: []string{"Content-Type", "text/plain"}, want: 415},
		specCall{method: "PUT", path: parts + "3", token: tokenA, body: strings.Repeat("x", 5<<20+1), headers: []string{"Content-Type", "text/csv"}, want: 413},
		specCall{method: "PUT", path: parts + "3", token: tokenB, body: nd, headers: []string{"Content-Type", "application/x-ndjson"}, want: 404},
		specCall{method: "GET", path: "/v1/jobs/" + staged.ID + "/recipients", token: tokenA, want: 200},
		specCall{method: "GET", path: "/v1/jobs/" + staged.ID + "/recipients", token: tokenB, want: 404},
		specCall{method: "GET", path: "/v1/jobs/" + staged.ID + "/recipients", want: 401},
		specCall{method: "POST", path: "/v1/jobs/" + staged.ID + "/preview", token: tokenA, want: 200},
		specCall{method: "POST", path: "/v1/jobs/" + staged.ID + "/preview", token: tokenB, want: 404},
		specCall{method: "POST", path: "/v1/jobs/" + staged.ID + "/start", token: tokenA, body: `{"parts": 3}`, want: 422},
		specCall{method: "POST", path: "/v1/jobs/" + staged.ID + "/start", token: tokenA, body: `{"parts": "3"}`, want: 400},
		specCall{method: "POST", path: "/v1/jobs/" + staged.ID + "/start", token: tokenA, body: `{"parts": 3}`, headers: []string{"Content-Type", "text/csv"}, want: 415},
		specCall{method: "POST", path: "/v1/jobs/" + staged.ID + "/start", token: tokenA, body: `{"parts": ` + strings.Repeat(" ", 11<<20) + `2}`, want: 413},
		specCall{method: "POST", path: "/v1/jobs/" + staged.ID + "/start", token: tokenB, body: `{"parts": 2}`, want: 404},
		specCall{method: "POST", path: "/v1/jobs/" + staged.ID + "/start", token: tokenA, body: `{"parts": 2}`, want: 202},
		specCall{method: "POST", path: "/v1/jobs/" + staged.ID + "/start", token: tokenA, body: `{"parts": 1}`, want: 409},
		specCall{method: "PUT", path: parts + "3", token: tokenA, body: nd, headers: []string{"Content-Type", "application/x-ndjson"}, want: 409},
		specCall{method: "POST", path: "/v1/jobs/" + staged.ID + "/preview", token: tokenA, want: 409},
	)
	// Preview: the body of POST /v1/jobs, nothing stored.
	c.run(s,
		specCall{method: "POST", path: "/v1/jobs/preview", token: tokenA, body: jobBody(6), want: 200},
		specCall{method: "POST", path: "/v1/jobs/preview", token: tokenA, body: `{"template": "Hi", "recipients": [`, want: 400},
		specCall{method: "POST", path: "/v1/jobs/preview", token: tokenA, body: `{"template": "Hi {{name}}", "recipients": [{"account": "ghost", "to": "u1"}]}`, want: 422},
		specCall{method: "POST", path: "/v1/jobs/preview", token: tokenA, body: body, headers: []string{"Content-Type", "text/csv"}, want: 415},
	)
	// Metadata and refs: shown on the job and its items, searchable.
	tagged := `{"name": "tagged", "template": "Hi", "metadata": {"order": "A-1", "crm": "42"},
		"recipients": [{"account": "acct-a", "to": "u1", "ref": "cust-1"}, {"account": "acct-b", "to": "u2"}]}`
	var taggedJob api.Job
	c.run(s, specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: tagged, want: 202})[0].json(t, &taggedJob)
	if taggedJob.Metadata["order"] != "A-1" {
		t.Errorf("the job shows metadata %v", taggedJob.Metadata)
	}
	var refItems api.ItemList
	c.run(s, specCall{method: "GET", path: "/v1/jobs/" + taggedJob.ID + "/items?ref=cust-1", token: tokenA, want: 200})[0].json(t, &refItems)
	if len(refItems.Items) != 1 || refItems.Items[0].To != "u1" || refItems.Items[0].Ref != "cust-1" {
		t.Errorf("items with ref cust-1: %+v", refItems.Items)
	}
	c.run(s,
		specCall{method: "GET", path: "/v1/jobs/" + taggedJob.ID + "/items?ref=" + strings.Repeat("r", 201), token: tokenA, want: 400},
		specCall{method: "POST", path: "/v1/jobs", token: tokenA, want: 422,
			body: `{"template": "Hi", "metadata": {"` + strings.Repeat("k", 41) + `": "v"}, "recipients": [{"account": "acct-a", "to": "u1"}]}`},
		specCall{method: "POST", path: "/v1/jobs", token: tokenA, want: 400,
			body: `{"template": "Hi", "metadata": {"k": 1}, "recipients": [{"account": "acct-a", "to": "u1"}]}`},
	)

	var list api.JobList
	c.run(s, specCall{method: "GET", path: "/v1/jobs?limit=1", token: tokenA, want: 200})[0].json(t, &list)
	if len(list.Jobs) != 1 || list.NextCursor == "" {
		t.Fatalf("first page: %d jobs, next %q", len(list.Jobs), list.NextCursor)
	}
	c.run(s,
		specCall{method: "GET", path: "/v1/jobs?cursor=" + list.NextCursor, token: tokenA, want: 200},
		specCall{method: "GET", path: "/v1/jobs", token: tokenB, want: 200},
		specCall{method: "GET", path: "/v1/jobs?limit=0", token: tokenA, want: 400},
		specCall{method: "GET", path: "/v1/jobs?cursor=%25garbage", token: tokenA, want: 400},
	)

	// A job with history: one item failed with an error, one confirmed, so
	// the views carry failures, errors, timestamps and a moved cursor.
	var job api.Job
	c.run(s, specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: jobBody(8),
		headers: []string{"Idempotency-Key", "spec-history"}, want: 202})[0].json(t, &job)
	claimed, err := s.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: job.ID, Index: 0, Max: 2, Now: s.clock.Now(), ClaimID: "spec"})
	if err != nil || len(claimed.Items) != 2 {
		t.Fatalf("claim: %v (%d items)", err, len(claimed.Items))
	}
	if _, err := s.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: job.ID, Index: 0, At: s.clock.Now(), Updates: []store.ItemUpdate{
		{Seq: claimed.Items[0].Seq, From: store.ItemSubmitted, ClaimID: "spec", To: store.ItemFailed,
			Error: &store.ItemError{Category: store.CategoryPermanent, Code: "81013", Message: "invalid recipient"}},
		{Seq: claimed.Items[1].Seq, From: store.ItemSubmitted, ClaimID: "spec", To: store.ItemConfirmed},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.RecountShard(ctx, job.ID, 0); err != nil {
		t.Fatal(err)
	}
	jobPath := "/v1/jobs/" + job.ID
	var got api.Job
	c.run(s, specCall{method: "GET", path: jobPath, token: tokenA, want: 200})[0].json(t, &got)
	if got.Failures[store.CategoryPermanent] != 1 {
		t.Errorf("the job view shows no permanent failure: %+v", got.Failures)
	}
	// Confirmed on a second attempt: counted as needing a retry.
	retry, err := s.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: job.ID, Index: 0, Max: 1, Now: s.clock.Now(), ClaimID: "spec-r1"})
	if err != nil || len(retry.Items) != 1 {
		t.Fatalf("claim: %v (%d items)", err, len(retry.Items))
	}
	if _, err := s.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: job.ID, Index: 0, At: s.clock.Now(), Updates: []store.ItemUpdate{
		{Seq: retry.Items[0].Seq, From: store.ItemSubmitted, ClaimID: "spec-r1", To: store.ItemPending, NextAttemptAt: s.clock.Now(),
			Error: &store.ItemError{Category: store.CategoryRetryable}}}}); err != nil {
		t.Fatal(err)
	}
	if retry, err = s.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: job.ID, Index: 0, Max: 1, Now: s.clock.Now(), ClaimID: "spec-r2"}); err != nil || len(retry.Items) != 1 {
		t.Fatalf("claim again: %v", err)
	}
	if _, err := s.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: job.ID, Index: 0, At: s.clock.Now(), Updates: []store.ItemUpdate{
		{Seq: retry.Items[0].Seq, From: store.ItemSubmitted, ClaimID: "spec-r2", To: store.ItemConfirmed}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.RecountShard(ctx, job.ID, 0); err != nil {
		t.Fatal(err)
	}
	c.run(s, specCall{method: "GET", path: jobPath, token: tokenA, want: 200})[0].json(t, &got)
	if got.ConfirmedAfterRetry != 1 || got.Counts.Confirmed != 2 {
		t.Errorf("after a confirmation on the second attempt: confirmed %d, confirmed_after_retry %d; want 2 and 1", got.Counts.Confirmed, got.ConfirmedAfterRetry)
	}
	if _, ok := got.Failures[store.TallyConfirmedAfterRetry]; ok {
		t.Errorf("failures lists %s: %v", store.TallyConfirmedAfterRetry, got.Failures)
	}

	// The per-minute series of the job and of its account.
	now := s.clock.Now()
	for _, add := range []store.AddSeriesParams{
		{Key: store.JobSeriesKey(job.ID), Minute: now.Add(-2 * time.Minute), Counts: map[string]int64{store.SeriesSent: 5, store.SeriesConfirmed: 4, store.CategoryPermanent: 1}},
		{Key: store.JobSeriesKey(job.ID), Minute: now, Counts: map[string]int64{store.SeriesSent: 2}},
		{Key: store.JobSeriesKey(job.ID), Minute: now.Add(-3 * time.Hour), Counts: map[string]int64{store.SeriesSent: 9}},
		{Key: store.AccountSeriesKey("tenant-a", "acct-c"), Minute: now, Counts: map[string]int64{store.SeriesSent: 30, store.SeriesConfirmed: 29}},
	} {
		if err := s.store.AddSeries(ctx, add); err != nil {
			t.Fatal(err)
		}
	}
	var series api.JobSeries
	c.run(s, specCall{method: "GET", path: jobPath + "/series", token: tokenA, want: 200})[0].json(t, &series)
	if len(series.Points) != 2 || series.Points[0].Sent != 5 || series.Points[0].Confirmed != 4 || series.Points[0].Failures[store.CategoryPermanent] != 1 ||
		series.Points[1].Sent != 2 || !series.Points[1].At.Equal(now.UTC().Truncate(time.Minute)) {
		t.Errorf("job series: %+v", series)
	}
	var acctSeries api.AccountSeries
	c.run(s, specCall{method: "GET", path: "/v1/accounts/acct-c/series?minutes=5", token: tokenA, want: 200})[0].json(t, &acctSeries)
	if len(acctSeries.Points) != 1 || acctSeries.Points[0].Sent != 30 || acctSeries.BatchRatePerSec != 8 {
		t.Errorf("account series: %+v", acctSeries)
	}
	c.run(s,
		specCall{method: "GET", path: jobPath + "/series?minutes=240", token: tokenA, want: 200},
		specCall{method: "GET", path: jobPath + "/series?minutes=0", token: tokenA, want: 400},
		specCall{method: "GET", path: jobPath + "/series", token: tokenB, want: 404},
		specCall{method: "GET", path: "/v1/jobs/nope/series", token: tokenA, want: 404},
		specCall{method: "GET", path: "/v1/accounts/acct-c/series?minutes=x", token: tokenA, want: 400},
		specCall{method: "GET", path: "/v1/accounts/acct-c/series", token: tokenB, want: 404},
	)

	// Breaker history: an open, a probe, a close, newest first.
	brk := &breaker.Breakers{Store: s.store, Clock: s.clock}
	if _, err := brk.OpenFor(ctx, "tenant-a", "acct-c", breaker.Cause{Reason: "20 failed sends in a row", ConsecutiveFailures: 20}); err != nil {
		t.Fatal(err)
	}
	s.clock.Advance(time.Minute)
	if d, err := brk.Gate(ctx, "tenant-a", "acct-c", "job/0"); err != nil || !d.Probe {
		t.Fatalf("gate after the cool-down: %+v, %v", d, err)
	}
	if err := brk.ProbeResult(ctx, "tenant-a", "acct-c", "job/0", true); err != nil {
		t.Fatal(err)
	}
	var history api.BreakerHistory
	c.run(s, specCall{method: "GET", path: "/v1/accounts/acct-c/breaker/history", token: tokenARead, want: 200})[0].json(t, &history)
	if len(history.Transitions) != 3 || history.Transitions[0].To != "closed" || history.Transitions[1].To != "half_open" ||
		history.Transitions[2].To != "open" || history.Transitions[2].ConsecutiveFailures != 20 || history.Transitions[2].Until == nil {
		t.Errorf("breaker history: %+v", history)
	}
	c.run(s,
		specCall{method: "GET", path: "/v1/accounts/acct-d/breaker/history", token: tokenA, want: 200},
		specCall{method: "GET", path: "/v1/accounts/acct-c/breaker/history", token: tokenB, want: 404},
		specCall{method: "GET", path: "/v1/accounts/nope/breaker/history", token: tokenA, want: 404},
	)

	var items api.ItemList
	c.run(s, specCall{method: "GET", path: jobPath + "/items?status=failed", token: tokenA, want: 200})[0].json(t, &items)
	if len(items.Items) != 1 || items.Items[0].Error == nil {
		t.Errorf("failed items: %+v", items.Items)
	}
	// An item under review: sent, no confirmed answer.
	review, err := s.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: job.ID, Index: 0, Max: 1, Now: s.clock.Now(), ClaimID: "spec-review"})
	if err != nil || len(review.Items) != 1 {
		t.Fatalf("claim: %v (%d items)", err, len(review.Items))
	}
	reviewSeq := fmt.Sprint(review.Items[0].Seq)
	if res, err := s.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: job.ID, Index: 0, At: s.clock.Now(), Updates: []store.ItemUpdate{
		{Seq: review.Items[0].Seq, From: store.ItemSubmitted, ClaimID: "spec-review", To: store.ItemSubmitted,
			Error: &store.ItemError{Category: store.CategoryUncertain, Message: "no answer"}},
	}}); err != nil || len(res.Rejected) > 0 {
		t.Fatalf("mark under review: %v %+v", err, res)
	}
	if _, err := s.store.RecountShard(ctx, job.ID, 0); err != nil {
		t.Fatal(err)
	}
	c.run(s,
		specCall{method: "GET", path: jobPath + "/items?category=uncertain", token: tokenA, want: 200},
		specCall{method: "POST", path: jobPath + "/items/" + reviewSeq + "/resolve", token: tokenA, body: `{"outcome": "maybe"}`, want: 422},
		specCall{method: "POST", path: jobPath + "/items/x/resolve", token: tokenA, body: `{"outcome": "delivered"}`, want: 400},
		specCall{method: "POST", path: jobPath + "/items/" + reviewSeq + "/resolve", token: tokenA, body: `{"verdict": "delivered"}`, want: 400},
		specCall{method: "POST", path: jobPath + "/items/" + reviewSeq + "/resolve", token: tokenB, body: `{"outcome": "delivered"}`, want: 404},
		specCall{method: "POST", path: "/v1/jobs/nope/items/1/resolve", token: tokenA, body: `{"outcome": "delivered"}`, want: 404},
		specCall{method: "POST", path: jobPath + "/items/" + reviewSeq + "/resolve", token: tokenA, body: `{"outcome": "delivered"}`, want: 200},
		specCall{method: "POST", path: jobPath + "/items/" + reviewSeq + "/resolve", token: tokenA, body: `{"outcome": "resend"}`, want: 409},

		specCall{method: "POST", path: jobPath + "/redrive", token: tokenA, body: `{"category": "cancelled"}`, want: 422},
		specCall{method: "POST", path: jobPath + "/redrive", token: tokenA, body: `{"category": 1}`, want: 400},
		specCall{method: "POST", path: jobPath + "/redrive", token: tokenB, body: `{"category": "permanent"}`, want: 404},
		specCall{method: "POST", path: "/v1/jobs/nope/redrive", token: tokenA, body: `{"category": "permanent"}`, want: 404},
		specCall{method: "POST", path: jobPath + "/redrive", token: tokenA, body: `{"category": "permanent"}`, want: 200},
		specCall{method: "POST", path: jobPath + "/redrive", token: tokenA, body: `{"category": "exhausted"}`, want: 200},
	)
	c.run(s,
		specCall{method: "GET", path: jobPath + "/items", token: tokenA, want: 200},
		specCall{method: "GET", path: jobPath + "/items?limit=2", token: tokenA, want: 200},
		specCall{method: "GET", path: jobPath + "/items?category=permanent", token: tokenA, want: 200},
		specCall{method: "GET", path: jobPath + "/items?status=lost&category=odd", token: tokenA, want: 400},
		specCall{method: "GET", path: jobPath + "/items", token: tokenB, want: 404},
		specCall{method: "GET", path: "/v1/jobs/nope/items", token: tokenA, want: 404},
		specCall{method: "GET", path: "/v1/jobs/nope", token: tokenA, want: 404},

		// Commands.
		specCall{method: "PATCH", path: jobPath, token: tokenA, body: `{"rate_per_sec": 5, "budget": 100}`, want: 200},
		specCall{method: "PATCH", path: jobPath, token: tokenA, body: `{"budget": 1.5}`, want: 400},
		specCall{method: "PATCH", path: jobPath, token: tokenA, body: `{}`, want: 422},
		specCall{method: "PATCH", path: jobPath, token: tokenA, body: `{"budget": -1}`, want: 422},
		specCall{method: "PATCH", path: "/v1/jobs/nope", token: tokenA, body: `{"budget": 1}`, want: 404},
		specCall{method: "POST", path: jobPath + "/resume", token: tokenA, want: 409},
		specCall{method: "POST", path: jobPath + "/pause", token: tokenA, want: 200},
		specCall{method: "POST", path: jobPath + "/pause", token: tokenA, want: 409},
		specCall{method: "POST", path: jobPath + "/resume", token: tokenA, want: 200},
		specCall{method: "POST", path: jobPath + "/cancel", token: tokenA, want: 200},
		specCall{method: "POST", path: jobPath + "/cancel", token: tokenA, want: 409},
		specCall{method: "PATCH", path: jobPath, token: tokenA, body: `{"budget": 1}`, want: 409},
		specCall{method: "POST", path: "/v1/jobs/nope/pause", token: tokenA, want: 404},
		specCall{method: "POST", path: jobPath + "/resume", token: tokenB, want: 404},
		specCall{method: "POST", path: "/v1/jobs/nope/cancel", token: tokenA, want: 404},
		specCall{method: "POST", path: jobPath + "/redrive", token: tokenA, body: `{"category": "permanent"}`, want: 409},
		specCall{method: "GET", path: jobPath, token: tokenA, want: 200},

		// Suppression list.
		specCall{method: "PUT", path: "/v1/suppressions/acct-a/user-1", token: tokenA, body: `{"reason": "unsubscribed"}`, want: 200},
		specCall{method: "PUT", path: "/v1/suppressions/acct-a/user-2", token: tokenA, want: 200},
		specCall{method: "PUT", path: "/v1/suppressions/acct-a/user-3", token: tokenA, body: `{"reason": 1}`, want: 400},
		specCall{method: "PUT", path: "/v1/suppressions/acct-a/user-3", token: tokenA, body: `{"reason": "` + strings.Repeat("x", 1100) + `"}`, want: 422},
		specCall{method: "POST", path: "/v1/suppressions", token: tokenA, body: `{"entries": [{"account": "acct-a", "to": "u9"}, {"account": "acct-b", "to": "u9", "reason": "complaint"}]}`, want: 200},
		specCall{method: "POST", path: "/v1/suppressions", token: tokenA, body: `{"entries": []}`, want: 422},
		specCall{method: "POST", path: "/v1/suppressions", token: tokenA, body: `{"entries": [{"account": "acct-a"}]}`, want: 422},
		specCall{method: "POST", path: "/v1/suppressions", token: tokenA, body: `{"entries": "x"}`, want: 400},
		specCall{method: "GET", path: "/v1/suppressions?limit=2", token: tokenA, want: 200},
		specCall{method: "GET", path: "/v1/suppressions?limit=0", token: tokenA, want: 400},
		specCall{method: "DELETE", path: "/v1/suppressions/acct-a/user-2", token: tokenA, want: 204},
		specCall{method: "GET", path: "/v1/suppressions", token: tokenB, want: 200},
	)

	// Campaigns.
	campaign := `{"id": "weekly", "name": "Weekly digest", "schedule": "cron(0 9 ? * MON *)", "mode": "snapshot", "max_delay_sec": 900,
		"request": {"template": "Hi {{name}}", "recipients": [{"account": "acct-a", "to": "u1", "vars": {"name": "Li"}}], "budget": 10}}`
	c.run(s,
		specCall{method: "POST", path: "/v1/campaigns", token: tokenA, body: campaign, want: 201},
		specCall{method: "POST", path: "/v1/campaigns", token: tokenA, body: strings.Replace(campaign, `"max_delay_sec": 900`, `"enabled": false`, 1), want: 200},
		specCall{method: "POST", path: "/v1/campaigns", token: tokenA, want: 201, body: `{"name": "VIPs", "schedule": "rate(1 day)", "mode": "requery",
			"source": "https://crm.example/recipients?segment=vip", "request": {"template": "Hi {{name}}"}}`},
		specCall{method: "POST", path: "/v1/campaigns", token: tokenA, body: strings.Replace(campaign, "cron(0 9 ? * MON *)", "cron(0 9 * * * *)", 1), want: 422},
		specCall{method: "POST", path: "/v1/campaigns", token: tokenA, body: `{"name": "x", "schedule": "rate(1 day)", "mode": "snapshot"}`, want: 422},
		specCall{method: "POST", path: "/v1/campaigns", token: tokenA, body: `{"name": "x", "mode": 1}`, want: 400},
		specCall{method: "GET", path: "/v1/campaigns", token: tokenA, want: 200},
		specCall{method: "GET", path: "/v1/campaigns", token: tokenB, want: 200},
		specCall{method: "GET", path: "/v1/campaigns/weekly", token: tokenA, want: 200},
		specCall{method: "GET", path: "/v1/campaigns/weekly", token: tokenB, want: 404},
		specCall{method: "GET", path: "/v1/campaigns/nope", token: tokenA, want: 404},
		specCall{method: "DELETE", path: "/v1/campaigns/weekly", token: tokenB, want: 404},
		specCall{method: "DELETE", path: "/v1/campaigns/weekly", token: tokenA, want: 204},
		specCall{method: "DELETE", path: "/v1/campaigns/weekly", token: tokenA, want: 404},
	)

	// Bodies of a media type the operation does not take: 415.
	c.run(s,
		specCall{method: "PUT", path: "/v1/accounts/acct-c", token: tokenA, body: `{"rate_per_sec": 1}`, headers: []string{"Content-Type", "text/plain"}, want: 415},
		specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: body, headers: []string{"Content-Type", "text/csv"}, want: 415},
		specCall{method: "PATCH", path: jobPath, token: tokenA, body: `{"budget": 1}`, headers: []string{"Content-Type", "text/plain"}, want: 415},
		specCall{method: "POST", path: jobPath + "/redrive", token: tokenA, body: `{"category": "permanent"}`, headers: []string{"Content-Type", "text/plain"}, want: 415},
		specCall{method: "POST", path: jobPath + "/items/0/resolve", token: tokenA, body: `{"outcome": "resend"}`, headers: []string{"Content-Type", "multipart/form-data; boundary=b"}, want: 415},
		specCall{method: "PUT", path: "/v1/suppressions/acct-a/u7", token: tokenA, body: `{"reason": "x"}`, headers: []string{"Content-Type", "text/plain"}, want: 415},
		specCall{method: "POST", path: "/v1/suppressions", token: tokenA, body: `{"entries": []}`, headers: []string{"Content-Type", "text/csv"}, want: 415},
		specCall{method: "POST", path: "/v1/campaigns", token: tokenA, body: campaign, headers: []string{"Content-Type", "text/plain"}, want: 415},
	)

	webhookConformance(t, c, s)

	// Every authenticated route refuses a missing or unknown token.
	for _, route := range api.Routes() {
		method, path, _ := strings.Cut(route, " ")
		if route == "GET /healthz" || route == "GET /v1/openapi.json" || route == "GET /v1/openapi-3.0.json" ||
			strings.Contains(route, " /v1/callbacks/") { // signed by the provider, not by a token: 403
			continue
		}
		path = strings.NewReplacer("{account}", "acct-a", "{id}", job.ID, "{seq}", "0", "{to}", "user-1", "{delivery}", "d", "{tenant}", "tenant-a", "{part}", "1").Replace(path)
		c.run(s,
			specCall{method: method, path: path, want: 401},
			specCall{method: method, path: path, token: "not-a-token", want: 401},
		)
	}

	// Tokens of the tenant (admin), and the platform operator's calls.
	var newTok api.NewTokenAnswer
	c.run(s,
		specCall{method: "POST", path: "/v1/tokens", token: tokenA, body: `{"name": "ci", "role": "read", "expires_at": "2030-01-01T00:00:00Z"}`, want: 201},
		specCall{method: "POST", path: "/v1/tokens", token: tokenA, body: `{"name": "ci", "role": "root"}`, want: 422},
		specCall{method: "POST", path: "/v1/tokens", token: tokenA, body: `{"name": `, want: 400},
		specCall{method: "POST", path: "/v1/tokens", token: tokenA, body: `{"name": "x", "role": "read"}`, headers: []string{"Content-Type", "text/plain"}, want: 415},
		specCall{method: "GET", path: "/v1/tokens", token: tokenA, want: 200},
		specCall{method: "DELETE", path: "/v1/tokens/tok_nosuch", token: tokenA, want: 404},
		specCall{method: "PUT", path: "/v1/tenants/tenant-c/accounts/acct-c1", token: platformToken, want: 200},
		specCall{method: "PUT", path: "/v1/tenants/tenant-c/accounts/acct-a", token: platformToken, want: 409},
		specCall{method: "PUT", path: "/v1/tenants/tenant%20c/accounts/acct-c1", token: platformToken, want: 422},
		specCall{method: "POST", path: "/v1/tenants/tenant-c/tokens", token: platformToken, body: `{"name": "first", "role": "admin"}`, want: 201},
		specCall{method: "POST", path: "/v1/tenants/tenant-c/tokens", token: platformToken, body: `{"name": "", "role": "admin"}`, want: 422},
		specCall{method: "POST", path: "/v1/tenants/tenant-c/tokens", token: platformToken, body: `[`, want: 400},
		specCall{method: "POST", path: "/v1/tenants/tenant-c/tokens", token: platformToken, body: `{}`, headers: []string{"Content-Type", "text/plain"}, want: 415},
	)
	s.do("POST", "/v1/tokens", tokenA, `{"name": "to revoke", "role": "operate"}`).json(t, &newTok)
	c.run(s,
		specCall{method: "GET", path: "/v1/audit", token: tokenA, want: 200},
		specCall{method: "GET", path: "/v1/audit?job=" + job.ID + "&limit=2", token: tokenA, want: 200},
		specCall{method: "GET", path: "/v1/audit?cursor=bogus", token: tokenA, want: 400},
		specCall{method: "GET", path: "/v1/audit?limit=0", token: tokenA, want: 400},
	)
	c.run(s, specCall{method: "DELETE", path: "/v1/tokens/" + newTok.ID, token: tokenA, want: 204})

	// A read token reads, and is refused everything else (403, nothing
	// changed); tenant tokens are refused the platform's calls.
	for _, route := range api.Routes() {
		method, path, _ := strings.Cut(route, " ")
		if method == "GET" && path != "/v1/tokens" && path != "/v1/audit" || route == "GET /healthz" {
			continue
		}
		path = strings.NewReplacer("{account}", "acct-a", "{id}", job.ID, "{seq}", "0", "{to}", "user-1", "{delivery}", "d", "{tenant}", "tenant-a", "{part}", "1").Replace(path)
		c.run(s, specCall{method: method, path: path, token: tokenARead, body: `{}`, want: 403})
	}

	// Quotas (tenant B: one running job).
	c.run(s,
		specCall{method: "PUT", path: "/v1/tenants/tenant-b/quota", token: platformToken, body: `{"max_running_jobs": 1, "max_recipients_per_day": 0}`, want: 200},
		specCall{method: "PUT", path: "/v1/tenants/tenant-b/quota", token: platformToken, body: `{"max_running_jobs": -1, "max_recipients_per_day": 0}`, want: 422},
		specCall{method: "PUT", path: "/v1/tenants/tenant-b/quota", token: platformToken, body: `{"max_running_jobs": "1"}`, want: 400},
		specCall{method: "PUT", path: "/v1/tenants/tenant-b/quota", token: platformToken, body: `{}`, headers: []string{"Content-Type", "text/plain"}, want: 415},
		specCall{method: "PUT", path: "/v1/tenants/tenant-b/quota", token: tokenB, body: `{"max_running_jobs": 0, "max_recipients_per_day": 0}`, want: 403},
		specCall{method: "PUT", path: "/v1/tenants/tenant-b/quota", body: `{"max_running_jobs": 0, "max_recipients_per_day": 0}`, want: 401},
		specCall{method: "GET", path: "/v1/tenants/tenant-b/quota", token: platformToken, want: 200},
		specCall{method: "GET", path: "/v1/tenants/tenant%20b/quota", token: platformToken, want: 400},
		specCall{method: "GET", path: "/v1/tenants/tenant-b/quota", token: tokenB, want: 403},
		specCall{method: "GET", path: "/v1/tenants/tenant-b/quota", want: 401},
		specCall{method: "POST", path: "/v1/jobs", token: tokenB, body: jobBodyOn(2, tenantBAccounts[0], tenantBAccounts[1]), want: 202},
		specCall{method: "POST", path: "/v1/jobs", token: tokenB, body: jobBodyOn(2, tenantBAccounts[0], tenantBAccounts[1]), want: 429},
	)
	var stagedB api.Job
	c.run(s, specCall{method: "POST", path: "/v1/jobs", token: tokenB, body: `{"name": "big", "template": "Hi {{name}}", "staged": true}`, want: 201})[0].json(t, &stagedB)
	c.run(s,
		specCall{method: "PUT", path: "/v1/jobs/" + stagedB.ID + "/recipients/1", token: tokenB, body: `{"account": "acct-b1", "to": "u1", "vars": {"name": "A"}}` + "\n",
			headers: []string{"Content-Type", "application/x-ndjson"}, want: 200},
		specCall{method: "POST", path: "/v1/jobs/" + stagedB.ID + "/start", token: tokenB, body: `{"parts": 1}`, want: 429},
	)

	// Bodies over the limit.
	small := newStack(t, func(d *api.Deps) { d.MaxBodyBytes = 256 })
	padded := func(body string) string { return body[:len(body)-1] + strings.Repeat(" ", 300) + "}" }
	smallJob := small.submitJob(tokenA, "", 1)
	smallPath := "/v1/jobs/" + smallJob.ID
	c.run(small,
		specCall{method: "PUT", path: "/v1/accounts/acct-a", token: tokenA, body: padded(`{"rate_per_sec": 1}`), want: 413},
		specCall{method: "POST", path: "/v1/jobs", token: tokenA, body: jobBody(20), want: 413},
		specCall{method: "POST", path: "/v1/jobs/preview", token: tokenA, body: jobBody(20), want: 413},
		specCall{method: "PATCH", path: smallPath, token: tokenA, body: padded(`{"budget": 1}`), want: 413},
		specCall{method: "POST", path: smallPath + "/redrive", token: tokenA, body: padded(`{"category": "permanent"}`), want: 413},
		specCall{method: "POST", path: smallPath + "/items/0/resolve", token: tokenA, body: padded(`{"outcome": "resend"}`), want: 413},
		specCall{method: "PUT", path: "/v1/suppressions/acct-a/u1", token: tokenA, body: padded(`{"reason": "x"}`), want: 413},
		specCall{method: "POST", path: "/v1/suppressions", token: tokenA, body: padded(`{"entries": [{"account": "acct-a", "to": "u1"}]}`), want: 413},
		specCall{method: "POST", path: "/v1/campaigns", token: tokenA, body: padded(`{"name": "x"}`), want: 413},
		specCall{method: "POST", path: "/v1/webhooks", token: tokenA, body: padded(`{"url": "x"}`), want: 413},
		specCall{method: "POST", path: "/v1/tokens", token: tokenA, body: padded(`{"name": "x"}`), want: 413},
		specCall{method: "POST", path: "/v1/tenants/tenant-c/tokens", token: platformToken, body: padded(`{"name": "x"}`), want: 413},
		specCall{method: "PUT", path: "/v1/tenants/tenant-c/quota", token: platformToken, body: padded(`{"max_running_jobs": 1}`), want: 413},
	)

	// Paths and methods the description does not have: 404 and 405 problems.
	c.run(s,
		specCall{method: "GET", path: "/v2/jobs", token: tokenA, want: 404},
		specCall{method: "DELETE", path: jobPath, token: tokenA, want: 405},
	)

	// Every documented answer was seen, but those a healthy stack cannot
	// give: internal errors.
	doc, err := apispec.Load()
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				key := method + " " + path + " " + status
				if status == "500" {
					continue
				}
				if !c.seen[key] {
					missing = append(missing, key)
				}
			}
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("documented answer never provoked by this test: %s", m)
	}
}

// TestValidateAgainstSpecCatchesDrift proves the validator fails answers
// that break the description, so the conformance test cannot pass
// vacuously.
func TestValidateAgainstSpecCatchesDrift(t *testing.T) {
	okJob := map[string]any{
		"id": "j1", "name": "n", "status": "running", "pause_reason": nil, "total": 1,
		"counts":   map[string]any{"pending": 1, "submitted": 0, "confirmed": 0, "failed": 0, "abandoned": 0},
		"failures": map[string]any{}, "confirmed_after_retry": 0, "shards": []any{},
		"created_at": "2025-03-01T09:00:00Z", "started_at": nil, "finished_at": nil,
		"budget": 0, "budget_used": 0, "rate_per_sec": 0, "suppressed": 0, "created_by": "t", "metadata": map[string]any{},
	}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for kk, vv := range okJob {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	answer := func(status int, ct string, v any) *http.Response {
		b, _ := json.Marshal(v)
		return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(bytes.NewReader(b))}
	}
	get := httptest.NewRequest("GET", "/v1/jobs/j1", nil)
	if err := apispec.Validate(get, answer(200, "application/json", okJob)); err != nil {
		t.Fatalf("a valid job was refused: %v", err)
	}
	for name, tc := range map[string]struct {
		req  *http.Request
		resp *http.Response
	}{
		"unknown field":       {get, answer(200, "application/json", with("extra", 1))},
		"missing field":       {get, answer(200, "application/json", with("total", nil))},
		"wrong status enum":   {get, answer(200, "application/json", with("status", "sleeping"))},
		"null created_at":     {get, answer(200, "application/json", with("created_at", json.RawMessage("null")))},
		"null in pause enum":  {get, answer(200, "application/json", with("pause_reason", "null"))},
		"unknown category":    {get, answer(200, "application/json", with("failures", map[string]any{"lost": 1}))},
		"fractional integer":  {get, answer(200, "application/json", with("total", 1.5))},
		"undocumented status": {get, answer(418, "application/problem+json", map[string]any{"type": "urn:qunfa:problem:internal", "title": "x", "status": 418})},
		"error not a problem": {get, answer(404, "application/json", map[string]any{"error": "nope"})},
		"unrouted 200":        {httptest.NewRequest("GET", "/v1/nothing", nil), answer(200, "application/json", map[string]any{})},
		"405 without Allow": {httptest.NewRequest("DELETE", "/v1/jobs/j1", nil), answer(405, "application/problem+json",
			map[string]any{"type": "urn:qunfa:problem:method-not-allowed", "title": "x", "status": 405})},
		"401 without challenge": {get, answer(401, "application/problem+json",
			map[string]any{"type": "urn:qunfa:problem:unauthorized", "title": "x", "status": 401})},
	} {
		if err := apispec.Validate(tc.req, tc.resp); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestOpenAPIGeneratorFriendly holds the description to what client
// generators (oapi-codegen, openapi-typescript) turn into good types:
// numbers with a format (double, not float32; int64 integers), no null in
// an enum, no allOf+const overlays, object schemas named as components,
// one error category, and a servers list.
func TestOpenAPIGeneratorFriendly(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(api.OpenAPISpec(), &doc); err != nil {
		t.Fatal(err)
	}
	if servers, _ := doc["servers"].([]any); len(servers) == 0 {
		t.Error("no servers entry")
	}
	var walk func(path string, v any, inline bool)
	walk = func(path string, v any, inline bool) {
		switch n := v.(type) {
		case []any:
			for i, e := range n {
				walk(fmt.Sprintf("%s/%d", path, i), e, inline)
			}
		case map[string]any:
			types := map[string]bool{}
			switch ty := n["type"].(type) {
			case string:
				types[ty] = true
			case []any:
				for _, e := range ty {
					types[fmt.Sprint(e)] = true
				}
			}
			switch f, _ := n["format"].(string); {
			case types["number"] && f != "double":
				t.Errorf("%s: a number without format double (generators make float32 of it)", path)
			case types["integer"] && f != "int64" && f != "int32":
				t.Errorf("%s: an integer without format int64", path)
			}
			if enum, ok := n["enum"].([]any); ok && slices.Contains(enum, nil) {
				t.Errorf("%s: null in an enum (a bogus constant in generated code); make the property nullable instead", path)
			}
			if _, ok := n["const"]; ok {
				t.Errorf("%s: const (use a one-value enum)", path)
			}
			if _, ok := n["allOf"]; ok {
				t.Errorf("%s: allOf (write the schema out, or $ref it)", path)
			}
			if _, ok := n["exclusiveMinimum"]; ok {
				t.Errorf("%s: exclusiveMinimum (oapi-codegen before 2.8 reads it as the OpenAPI 3.0 boolean)", path)
			}
			if inline && types["object"] && n["properties"] != nil {
				t.Errorf("%s: an inline object schema; name it in components.schemas", path)
			}
			for k, e := range n {
				// Schemas under properties, items and additionalProperties
				// of a component are inline.
				in := inline || k == "properties" || k == "items" || k == "additionalProperties" || k == "anyOf" || k == "oneOf"
				if k == "schemas" && strings.HasSuffix(path, "/components") {
					in = false
				}
				walk(path+"/"+k, e, in)
			}
		}
	}
	walk("", doc, false)

	// One error category, referenced wherever a category appears.
	spec := string(api.OpenAPISpec())
	if n := strings.Count(spec, `"rate_limited"`); n != 1 {
		t.Errorf("the category rate_limited appears %d times; define ErrorCategory once and $ref it", n)
	}
}
