package api_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

func TestHealthzNeedsNoToken(t *testing.T) {
	s := newStack(t)
	r := s.do("GET", "/healthz", "", nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"ok"`) {
		t.Fatalf("healthz: %d %s", r.status, r.body)
	}
}

func TestAuth(t *testing.T) {
	s := newStack(t)
	job := s.submitJob(tokenA, "k1", 2)

	t.Run("no token", func(t *testing.T) {
		r := s.do("GET", "/v1/jobs", "", nil)
		wantProblem(t, r, http.StatusUnauthorized)
		if got := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
			t.Errorf("WWW-Authenticate = %q", got)
		}
	})
	t.Run("unknown token", func(t *testing.T) {
		r := s.do("GET", "/v1/jobs/"+job.ID, "not-a-token", nil)
		wantProblem(t, r, http.StatusUnauthorized)
		if got := r.header.Get("WWW-Authenticate"); !strings.Contains(got, "invalid_token") {
			t.Errorf("WWW-Authenticate = %q", got)
		}
	})
	t.Run("not bearer", func(t *testing.T) {
		r := s.do("GET", "/v1/jobs", "", nil, "Authorization", "Basic "+tokenA)
		wantProblem(t, r, http.StatusUnauthorized)
	})
	t.Run("other tenant's job is not found", func(t *testing.T) {
		before := s.totals()
		for _, rq := range []struct{ method, path, body string }{
			{"GET", "/v1/jobs/" + job.ID, ""},
			{"GET", "/v1/jobs/" + job.ID + "/items", ""},
			{"POST", "/v1/jobs/" + job.ID + "/pause", ""},
			{"POST", "/v1/jobs/" + job.ID + "/resume", ""},
			{"POST", "/v1/jobs/" + job.ID + "/cancel", ""},
			{"PATCH", "/v1/jobs/" + job.ID, `{"budget": 5}`},
		} {
			var body any
			if rq.body != "" {
				body = rq.body
			}
			wantProblem(t, s.do(rq.method, rq.path, tokenB, body), http.StatusNotFound)
		}
		var list api.JobList
		s.do("GET", "/v1/jobs", tokenB, nil).json(t, &list)
		if len(list.Jobs) != 0 {
			t.Errorf("tenant B lists %d jobs of tenant A", len(list.Jobs))
		}
		if after := s.totals(); after != before {
			t.Errorf("totals changed: %+v → %+v", before, after)
		}
		var j api.Job
		s.do("GET", "/v1/jobs/"+job.ID, tokenA, nil).json(t, &j)
		if j.Status != "running" || j.Budget != 0 {
			t.Errorf("job changed by another tenant: %+v", j)
		}
	})
}

func TestRoutingProblems(t *testing.T) {
	s := newStack(t)
	wantProblem(t, s.do("GET", "/v2/nothing", tokenA, nil), http.StatusNotFound)
	wantProblem(t, s.do("GET", "/v1/jobs/x/y/z", tokenA, nil), http.StatusNotFound)
	wantProblem(t, s.do("GET", "/v1/jobs/does-not-exist", tokenA, nil), http.StatusNotFound)
	r := s.do("DELETE", "/v1/jobs", tokenA, nil)
	wantProblem(t, r, http.StatusMethodNotAllowed)
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "POST") || !strings.Contains(allow, "GET") {
		t.Errorf("Allow = %q", allow)
	}
	wantProblem(t, s.do("GET", "/v1/jobs/x/pause", tokenA, nil), http.StatusMethodNotAllowed)
}

func TestAccounts(t *testing.T) {
	s := newStack(t)
	r := s.do("PUT", "/v1/accounts/acct-new", tokenA, `{"rate_per_sec": 10, "burst": 15, "online_reserve_per_sec": 2,
		"max_recipients_per_call": 5, "max_content_bytes": 2048, "warmup_sec": 600, "frequency_cap": {"max": 2, "window_sec": 86400}, "pacing": {"mode": "random", "min_gap_ms": 30}, "breaker": {"consecutive_failures": 20, "failure_rate": 0.5, "min_samples": 50, "cooldown_sec": 60}}`)
	if r.status != http.StatusOK {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	var a api.Account
	r.json(t, &a)
	want := api.Account{ID: "acct-new", RatePerSec: 10, Burst: 15, OnlineReservePerSec: 2, BatchRatePerSec: 8, MaxRecipientsPerCall: 5, MaxContentBytes: 2048, WarmupSec: 600,
		Provider: "wecomapi", StatusLookup: true,
		FrequencyCap: &store.FrequencyCap{Max: 2, WindowSec: 86400},
		Breaker:      store.BreakerConfig{ConsecutiveFailures: 20, FailureRate: 0.5, MinSamples: 50, CooldownSec: 60},
		BreakerState: api.BreakerState{State: "closed"}}
	a.UpdatedAt = nil
	if a.FrequencyCap == nil || *a.FrequencyCap != *want.FrequencyCap {
		t.Errorf("put answered frequency cap %v, want %v", a.FrequencyCap, *want.FrequencyCap)
	}
	a.FrequencyCap = want.FrequencyCap
	if a.Pacing == nil || *a.Pacing != (store.Pacing{Mode: "random", MinGapMs: 30}) {
		t.Errorf("put answered pacing %v, want random, 30 ms", a.Pacing)
	}
	a.Pacing = nil
	if a != want {
		t.Errorf("put answered %+v, want %+v", a, want)
	}
	var got api.Account
	s.do("GET", "/v1/accounts/acct-new", tokenA, nil).json(t, &got)
	got.UpdatedAt = nil
	if got.FrequencyCap == nil || *got.FrequencyCap != *want.FrequencyCap {
		t.Errorf("get answered frequency cap %v, want %v", got.FrequencyCap, *want.FrequencyCap)
	}
	got.FrequencyCap = want.FrequencyCap
	if got.Pacing == nil || *got.Pacing != (store.Pacing{Mode: "random", MinGapMs: 30}) {
		t.Errorf("get answered pacing %v, want random, 30 ms", got.Pacing)
	}
	got.Pacing = nil
	if got != want {
		t.Errorf("get answered %+v, want %+v", got, want)
	}

	// pacing null puts the account back on the token bucket.
	var tb api.Account
	s.do("PUT", "/v1/accounts/acct-new", tokenA, `{"rate_per_sec": 10, "pacing": null}`).json(t, &tb)
	if tb.Pacing != nil {
		t.Errorf("pacing null answered %+v, want none", *tb.Pacing)
	}

	// Defaults: burst = rate (at least 1), one recipient per call, 4 KiB
	// messages, no warm-up.
	var d api.Account
	s.do("PUT", "/v1/accounts/acct-slow", tokenA, `{"rate_per_sec": 0.5}`).json(t, &d)
	if d.Burst != 1 || d.MaxRecipientsPerCall != 1 || d.OnlineReservePerSec != 0 || d.MaxContentBytes != 4096 || d.WarmupSec != 0 || d.FrequencyCap != nil || d.Pacing != nil {
		t.Errorf("defaults: %+v", d)
	}
	s.do("PUT", "/v1/accounts/acct-fast", tokenA, `{"rate_per_sec": 40}`).json(t, &d)
	if d.Burst != 40 {
		t.Errorf("default burst = %v, want 40", d.Burst)
	}

	// Providers: each account names its own; a wecomapi account may have
	// no look-up; the other providers have none.
	for body, want := range map[string]struct {
		provider string
		lookup   bool
	}{
		`{"rate_per_sec": 5, "provider": "wecomapi", "status_lookup": false}`: {"wecomapi", false},
		`{"rate_per_sec": 5, "provider": "wecomapi", "status_lookup": true}`:  {"wecomapi", true},
	} {
		r := s.do("PUT", "/v1/accounts/acct-prov", tokenA, body)
		var a api.Account
		r.json(t, &a)
		if r.status != http.StatusOK || a.Provider != want.provider || a.StatusLookup != want.lookup {
			t.Errorf("PUT %s: %d provider %q status_lookup %v; want %q %v", body, r.status, a.Provider, a.StatusLookup, want.provider, want.lookup)
		}
		s.do("GET", "/v1/accounts/acct-prov", tokenA, nil).json(t, &a)
		if a.Provider != want.provider || a.StatusLookup != want.lookup {
			t.Errorf("GET after PUT %s: provider %q status_lookup %v", body, a.Provider, a.StatusLookup)
		}
	}

	var list api.AccountList
	s.do("GET", "/v1/accounts", tokenA, nil).json(t, &list)
	var ids []string
	for _, a := range list.Accounts {
		ids = append(ids, a.ID)
	}
	if !slices.Equal(ids, []string{"acct-a", "acct-b", "acct-fast", "acct-new", "acct-prov", "acct-slow"}) {
		t.Errorf("accounts of A = %v", ids)
	}
	wantProblem(t, s.do("GET", "/v1/accounts/acct-new", tokenB, nil), http.StatusNotFound)
	var sms api.Account
	smsBody := `{"rate_per_sec": 5, "provider": "http", "http": {"url": "https://93.184.215.14/send", "headers": {"Authorization": "Bearer {{secret}}"},
		"body": "{\"to\": \"{{to}}\", \"text\": \"{{content}}\"}", "accepted": [200], "throttled": [429], "permanent": [400]}}`
	if r := s.do("PUT", "/v1/accounts/sms-a", tokenA, smsBody); r.status != http.StatusOK {
		t.Fatalf("PUT an http account: %d %s", r.status, r.body)
	}
	s.do("GET", "/v1/accounts/sms-a", tokenA, nil).json(t, &sms)
	if sms.Provider != "http" || sms.HTTP == nil || sms.HTTP.URL != "https://93.184.215.14/send" || sms.HTTP.Headers["Authorization"] != "Bearer {{secret}}" || !slices.Equal(sms.HTTP.RateLimited, []int{429}) {
		t.Errorf("http account read back: %+v %+v", sms, sms.HTTP)
	}
	var tmpl api.Account
	if r := s.do("PUT", "/v1/accounts/wx42:notice-1", tokenA, `{"rate_per_sec": 5, "provider": "wechat-mp-template", "status_lookup": false}`); r.status != http.StatusOK {
		t.Fatalf("PUT a wechat-mp-template account: %d %s", r.status, r.body)
	} else if r.json(t, &tmpl); tmpl.Provider != "wechat-mp-template" || tmpl.StatusLookup || tmpl.MaxRecipientsPerCall != 1 {
		t.Errorf("wechat-mp-template account: %+v", tmpl)
	}
	var app api.Account
	if r := s.do("PUT", "/v1/accounts/ww1234:1000002", tokenA, `{"rate_per_sec": 5, "provider": "wecom-app", "max_recipients_per_call": 1000}`); r.status != http.StatusOK {
		t.Fatalf("PUT a wecom-app account: %d %s", r.status, r.body)
	} else if r.json(t, &app); app.Provider != "wecom-app" || app.StatusLookup || app.MaxRecipientsPerCall != 1000 {
		t.Errorf("wecom-app account: %+v", app)
	}

	for name, tc := range map[string]struct {
		body   string
		status int
		field  string
	}{
		"no rate":               {`{"burst": 3}`, 422, "rate_per_sec"},
		"zero rate":             {`{"rate_per_sec": 0}`, 422, "rate_per_sec"},
		"reserve >= rate":       {`{"rate_per_sec": 5, "online_reserve_per_sec": 5}`, 422, "online_reserve_per_sec"},
		"negative reserve":      {`{"rate_per_sec": 5, "online_reserve_per_sec": -1}`, 422, "online_reserve_per_sec"},
		"burst below 1":         {`{"rate_per_sec": 5, "burst": 0.5}`, 422, "burst"},
		"zero per call":         {`{"rate_per_sec": 5, "max_recipients_per_call": 0}`, 422, "max_recipients_per_call"},
		"zero content bytes":    {`{"rate_per_sec": 5, "max_content_bytes": 0}`, 422, "max_content_bytes"},
		"content over 16 KiB":   {`{"rate_per_sec": 5, "max_content_bytes": 16385}`, 422, "max_content_bytes"},
		"negative warm-up":      {`{"rate_per_sec": 5, "warmup_sec": -1}`, 422, "warmup_sec"},
		"warm-up over a day":    {`{"rate_per_sec": 5, "warmup_sec": 86401}`, 422, "warmup_sec"},
		"fraction warm-up":      {`{"rate_per_sec": 5, "warmup_sec": 1.5}`, 400, "warmup_sec"},
		"cap max 0":             {`{"rate_per_sec": 5, "frequency_cap": {"max": 0, "window_sec": 60}}`, 422, "frequency_cap.max"},
		"cap without window":    {`{"rate_per_sec": 5, "frequency_cap": {"max": 1}}`, 422, "frequency_cap.window_sec"},
		"cap window > 31 days":  {`{"rate_per_sec": 5, "frequency_cap": {"max": 1, "window_sec": 2678401}}`, 422, "frequency_cap.window_sec"},
		"cap unknown field":     {`{"rate_per_sec": 5, "frequency_cap": {"max": 1, "window": 60}}`, 400, "window"},
		"failure rate > 1":      {`{"rate_per_sec": 5, "breaker": {"failure_rate": 2}}`, 422, "breaker.failure_rate"},
		"unknown field":         {`{"rate_per_sec": 5, "rate": 3}`, 400, "rate"},
		"wrong type":            {`{"rate_per_sec": "5"}`, 400, "rate_per_sec"},
		"fraction per call":     {`{"rate_per_sec": 5, "max_recipients_per_call": 1.5}`, 400, "max_recipients_per_call"},
		"unknown provider":      {`{"rate_per_sec": 5, "provider": "sms"}`, 422, "provider"},
		"look-up on wecom-app":  {`{"rate_per_sec": 5, "provider": "wecom-app", "status_lookup": true}`, 422, "status_lookup"},
		"wecom-app not an app":  {`{"rate_per_sec": 5, "provider": "wecom-app"}`, 422, "account"},
		"over wecom-app limit":  {`{"rate_per_sec": 5, "provider": "wecom-app", "max_recipients_per_call": 1001}`, 422, "max_recipients_per_call"},
		"http without config":   {`{"rate_per_sec": 5, "provider": "http"}`, 422, "http"},
		"http to loopback":      {`{"rate_per_sec": 5, "provider": "http", "http": {"url": "http://127.0.0.1:9/x", "accepted": [200]}}`, 422, "http.url"},
		"http nothing accepted": {`{"rate_per_sec": 5, "provider": "http", "http": {"url": "https://93.184.215.14/x"}}`, 422, "http"},
		"http on wecomapi":      {`{"rate_per_sec": 5, "http": {"url": "https://93.184.215.14/x", "accepted": [200]}}`, 422, "http"},
		"template takes one":    {`{"rate_per_sec": 5, "provider": "wechat-mp-template", "max_recipients_per_call": 2}`, 422, "max_recipients_per_call"},
		"malformed":             {`{"rate_per_sec": 5`, 400, ""},
		"not an object":         {`[1]`, 400, ""},
		"empty body":            {``, 400, ""},
		"trailing data":         {`{"rate_per_sec": 5} {}`, 400, ""},
		"breaker wrong type":    {`{"rate_per_sec": 5, "breaker": {"cooldown_sec": "1m"}}`, 400, "breaker.cooldown_sec"},
		"pacing mode unknown":   {`{"rate_per_sec": 5, "pacing": {"mode": "jitter"}}`, 422, "pacing.mode"},
		"pacing mode missing":   {`{"rate_per_sec": 5, "pacing": {"min_gap_ms": 10}}`, 422, "pacing.mode"},
		"negative min gap":      {`{"rate_per_sec": 5, "pacing": {"mode": "random", "min_gap_ms": -1}}`, 422, "pacing.min_gap_ms"},
		"min gap over 60 s":     {`{"rate_per_sec": 0.001, "pacing": {"mode": "random", "min_gap_ms": 60001}}`, 422, "pacing.min_gap_ms"},
		"min gap >= mean gap":   {`{"rate_per_sec": 12, "online_reserve_per_sec": 2, "pacing": {"mode": "random", "min_gap_ms": 100}}`, 422, "pacing.min_gap_ms"},
		"pacing unknown field":  {`{"rate_per_sec": 5, "pacing": {"mode": "random", "gap": 10}}`, 400, "gap"},
	} {
		t.Run(name, func(t *testing.T) {
			p := wantProblem(t, s.do("PUT", "/v1/accounts/acct-bad", tokenA, tc.body), tc.status)
			if tc.field != "" && !slices.ContainsFunc(p.Errors, func(f submit.FieldError) bool { return f.Field == tc.field }) {
				t.Errorf("errors %+v do not name %q", p.Errors, tc.field)
			}
			wantProblem(t, s.do("GET", "/v1/accounts/acct-bad", tokenA, nil), http.StatusNotFound)
		})
	}
	p := wantProblem(t, s.do("PUT", "/v1/accounts/has%20space", tokenA, `{"rate_per_sec": 5}`), 422)
	if len(p.Errors) != 1 || p.Errors[0].Field != "account" {
		t.Errorf("errors = %+v", p.Errors)
	}

	// Sizing: null until a sender measured the account, then what it chose.
	if raw := keysOf(t, s.do("GET", "/v1/accounts/acct-new", tokenA, nil).body); raw["sizing"] != nil {
		t.Errorf("sizing of an account never measured: %v", raw["sizing"])
	} else if _, ok := raw["sizing"]; !ok {
		t.Error("the account view has no sizing")
	}
	measured := s.clock.Now().Add(-time.Second)
	if err := s.store.SaveAccountSizing(context.Background(), store.SaveAccountSizingParams{Tenant: "tenant-a", Account: "acct-new",
		Sizing: store.AccountSizing{BatchSize: 3, Concurrency: 2, P99: 2100 * time.Millisecond, At: measured}}); err != nil {
		t.Fatal(err)
	}
	wantSizing := api.AccountSizing{BatchSize: 3, Concurrency: 2, P99MS: 2100, MeasuredAt: measured.UTC()}
	s.do("GET", "/v1/accounts/acct-new", tokenA, nil).json(t, &got)
	if got.Sizing == nil || *got.Sizing != wantSizing {
		t.Errorf("sizing %+v, want %+v", got.Sizing, wantSizing)
	}
	s.do("GET", "/v1/accounts", tokenA, nil).json(t, &list)
	for _, a := range list.Accounts {
		if (a.ID == "acct-new") != (a.Sizing != nil) {
			t.Errorf("listed %s with sizing %+v", a.ID, a.Sizing)
		}
	}
}

// keysOf decodes a JSON object's keys.
func keysOf(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := jsonUnmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, raw)
	}
	return m
}

func TestSubmitAndGetJob(t *testing.T) {
	s := newStack(t)
	r := s.do("POST", "/v1/jobs", tokenA, jobBody(5), "Idempotency-Key", "sale-1")
	if r.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	var j api.Job
	r.json(t, &j)
	if loc := r.header.Get("Location"); loc != "/v1/jobs/"+j.ID {
		t.Errorf("Location = %q", loc)
	}
	if j.ID == "" || j.Status != "running" || j.Total != 5 || len(j.Shards) != 2 || j.Counts.Pending != 5 || j.CreatedBy != "tenant-a" {
		t.Errorf("job = %+v", j)
	}
	if !j.CreatedAt.Equal(s.clock.Now()) || j.FinishedAt != nil || j.PauseReason != nil {
		t.Errorf("timestamps = %v %v %v", j.CreatedAt, j.StartedAt, j.FinishedAt)
	}

	g := s.do("GET", "/v1/jobs/"+j.ID, tokenA, nil)
	if g.status != http.StatusOK {
		t.Fatalf("get: %d %s", g.status, g.body)
	}
	m := keysOf(t, g.body)
	for _, k := range []string{"id", "name", "status", "pause_reason", "total", "counts", "failures", "shards", "created_at", "started_at", "finished_at"} {
		if _, ok := m[k]; !ok {
			t.Errorf("job has no %q: %s", k, g.body)
		}
	}
	if m["pause_reason"] != nil || m["finished_at"] != nil {
		t.Errorf("unset fields must be null: %s", g.body)
	}
	if _, err := time.Parse(time.RFC3339, m["created_at"].(string)); err != nil {
		t.Errorf("created_at: %v", err)
	}
	counts := m["counts"].(map[string]any)
	for _, k := range []string{"pending", "submitted", "confirmed", "failed", "abandoned"} {
		if _, ok := counts[k]; !ok {
			t.Errorf("counts has no %q", k)
		}
	}
	shard := m["shards"].([]any)[0].(map[string]any)
	for _, k := range []string{"index", "account", "status", "cursor", "last_advanced_at", "counts"} {
		if _, ok := shard[k]; !ok {
			t.Errorf("shard has no %q", k)
		}
	}

	before := s.totals()
	again := s.do("POST", "/v1/jobs", tokenA, jobBody(5), "Idempotency-Key", "sale-1")
	if again.status != http.StatusAccepted || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("repeat: %d, Idempotent-Replayed %q, want 202 and true; %s", again.status, again.header.Get("Idempotent-Replayed"), again.body)
	}
	var j2 api.Job
	again.json(t, &j2)
	if j2.ID != j.ID {
		t.Errorf("repeat gave job %s, want %s", j2.ID, j.ID)
	}
	other := jobBody(5)
	other.Name = "another"
	p := wantProblem(t, s.do("POST", "/v1/jobs", tokenA, other, "Idempotency-Key", "sale-1"), http.StatusConflict)
	if !strings.Contains(p.Detail, "sale-1") {
		t.Errorf("detail = %q", p.Detail)
	}
	if after := s.totals(); after != before {
		t.Errorf("repeat and conflict changed totals: %+v → %+v", before, after)
	}
	// The same key under another tenant is another job.
	jb := s.submitJob(tokenB, "sale-1", 5)
	if jb.ID == j.ID {
		t.Error("tenants share idempotency keys")
	}
}

func TestListJobsNewestFirst(t *testing.T) {
	s := newStack(t)
	var ids []string
	for i := range 5 {
		ids = append(ids, s.submitJob(tokenA, fmt.Sprintf("k%d", i), 2).ID)
		s.clock.Advance(time.Second)
	}
	slices.Reverse(ids)
	var got []string
	cursor := ""
	pages := 0
	for {
		var page api.JobList
		r := s.do("GET", "/v1/jobs?limit=2&cursor="+cursor, tokenA, nil)
		if r.status != http.StatusOK {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		r.json(t, &page)
		pages++
		for _, j := range page.Jobs {
			got = append(got, j.ID)
			if j.Total != 2 || j.Counts.Pending != 2 || len(j.Shards) != 2 {
				t.Errorf("listed job %+v", j)
			}
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if !slices.Equal(got, ids) || pages != 3 {
		t.Errorf("listed %v in %d pages, want %v", got, pages, ids)
	}
	wantProblem(t, s.do("GET", "/v1/jobs?limit=0", tokenA, nil), http.StatusBadRequest)
	wantProblem(t, s.do("GET", "/v1/jobs?cursor=garbage", tokenA, nil), http.StatusBadRequest)
}

func TestListItems(t *testing.T) {
	s := newStack(t)
	j := s.submitJob(tokenA, "k", 6)
	ctx := context.Background()
	// Fail one item of shard 0 the way a sender would.
	claim, err := s.store.ClaimItems(ctx, store.ClaimItemsParams{JobID: j.ID, Index: 0, Max: 1, Now: s.clock.Now(), ClaimID: "c1"})
	if err != nil || len(claim.Items) != 1 {
		t.Fatalf("claim: %v %v", claim, err)
	}
	seq := claim.Items[0].Seq
	if _, err := s.store.UpdateItems(ctx, store.UpdateItemsParams{JobID: j.ID, Index: 0, At: s.clock.Now(), Updates: []store.ItemUpdate{{
		Seq: seq, From: store.ItemSubmitted, ClaimID: "c1", To: store.ItemFailed,
		Error: &store.ItemError{Category: store.CategoryPermanent, Code: "81013", Message: "invalid recipient"},
	}}}); err != nil {
		t.Fatal(err)
	}

	var all api.ItemList
	s.do("GET", "/v1/jobs/"+j.ID+"/items", tokenA, nil).json(t, &all)
	if len(all.Items) != 6 || all.NextCursor != "" {
		t.Fatalf("items: %+v", all)
	}
	var failed api.ItemList
	r := s.do("GET", "/v1/jobs/"+j.ID+"/items?status=failed&category=permanent", tokenA, nil)
	r.json(t, &failed)
	if len(failed.Items) != 1 || failed.Items[0].Seq != seq || failed.Items[0].Error == nil ||
		*failed.Items[0].Error != (store.ItemError{Category: "permanent", Code: "81013", Message: "invalid recipient"}) ||
		failed.Items[0].Attempts != 1 || failed.Items[0].Status != "failed" {
		t.Errorf("failed items: %s", r.body)
	}
	m := keysOf(t, r.body)
	item := m["items"].([]any)[0].(map[string]any)
	for _, k := range []string{"seq", "account", "to", "status", "attempts", "error"} {
		if _, ok := item[k]; !ok {
			t.Errorf("item has no %q", k)
		}
	}
	var pending api.ItemList
	s.do("GET", "/v1/jobs/"+j.ID+"/items?status=pending&limit=2", tokenA, nil).json(t, &pending)
	if len(pending.Items) != 2 || pending.NextCursor == "" || pending.Items[0].Error != nil {
		t.Errorf("first page of pending: %+v", pending)
	}
	var rest api.ItemList
	s.do("GET", "/v1/jobs/"+j.ID+"/items?status=pending&limit=10&cursor="+pending.NextCursor, tokenA, nil).json(t, &rest)
	if len(rest.Items) != 3 {
		t.Errorf("second page of pending: %+v", rest)
	}

	for _, q := range []string{"status=sent", "category=bogus", "limit=-1", "limit=x"} {
		p := wantProblem(t, s.do("GET", "/v1/jobs/"+j.ID+"/items?"+q, tokenA, nil), http.StatusBadRequest)
		if len(p.Errors) == 0 {
			t.Errorf("%s: no field errors", q)
		}
	}
}

func TestJobCommands(t *testing.T) {
	s := newStack(t)
	j := s.submitJob(tokenA, "k", 4)
	path := "/v1/jobs/" + j.ID

	post := func(cmd string, want int) api.Job {
		t.Helper()
		r := s.do("POST", path+"/"+cmd, tokenA, nil)
		if want != http.StatusOK {
			wantProblem(t, r, want)
			return api.Job{}
		}
		if r.status != want {
			t.Fatalf("%s: %d %s", cmd, r.status, r.body)
		}
		var out api.Job
		r.json(t, &out)
		return out
	}
	if got := post("pause", 200); got.Status != "paused" || got.PauseReason == nil || *got.PauseReason != "manual" || len(got.Shards) != 2 {
		t.Errorf("pause: %+v", got)
	}
	post("pause", http.StatusConflict)
	if got := post("resume", 200); got.Status != "running" || got.PauseReason != nil {
		t.Errorf("resume: %+v", got)
	}
	post("resume", http.StatusConflict)

	r := s.do("PATCH", path, tokenA, `{"rate_per_sec": 2.5, "budget": 3}`)
	var lim api.Job
	r.json(t, &lim)
	if r.status != 200 || lim.RatePerSec != 2.5 || lim.Budget != 3 {
		t.Errorf("patch: %d %s", r.status, r.body)
	}
	s.do("PATCH", path, tokenA, `{"budget": 0}`).json(t, &lim)
	if lim.RatePerSec != 2.5 || lim.Budget != 0 {
		t.Errorf("patch keeps absent fields: %+v", lim)
	}
	wantProblem(t, s.do("PATCH", path, tokenA, `{"budget": -1}`), 422)
	wantProblem(t, s.do("PATCH", path, tokenA, `{}`), 422)
	wantProblem(t, s.do("PATCH", path, tokenA, `{"budget": "ten"}`), 400)
	wantProblem(t, s.do("PATCH", path, tokenA, `{"budgte": 1}`), 400)
	s.do("GET", path, tokenA, nil).json(t, &lim)
	if lim.RatePerSec != 2.5 || lim.Budget != 0 {
		t.Errorf("refused patches changed the job: %+v", lim)
	}

	if got := post("cancel", 200); got.Status != "cancelled" || got.FinishedAt == nil {
		t.Errorf("cancel: %+v", got)
	}
	// A cancelled job keeps its limits: 409, nothing stored.
	wantProblem(t, s.do("PATCH", path, tokenA, `{"rate_per_sec": 9, "budget": 50}`), http.StatusConflict)
	s.do("GET", path, tokenA, nil).json(t, &lim)
	if lim.RatePerSec != 2.5 || lim.Budget != 0 || lim.BudgetUsed != 0 {
		t.Errorf("a PATCH of a cancelled job changed it: %+v", lim)
	}
	post("cancel", http.StatusConflict)
	post("resume", http.StatusConflict)
	post("pause", http.StatusConflict)
	wantProblem(t, s.do("POST", "/v1/jobs/nope/pause", tokenA, nil), http.StatusNotFound)
}

// suppressBlocked puts "blocked-1" of acct-a on tenant A's suppression list.
func suppressBlocked(d *api.Deps) {
	if err := d.Store.PutSuppressions(context.Background(), "tenant-a", []store.Suppression{{Account: "acct-a", To: "blocked-1"}}); err != nil {
		panic(err)
	}
}

func TestBadSubmissionsChangeNothing(t *testing.T) {
	s := newStack(t, suppressBlocked, func(d *api.Deps) { d.MaxBodyBytes = 4 << 10 })
	s.submitJob(tokenA, "used", 3) // for the idempotency conflict

	big := jobBody(0)
	big.Template = "Hi {{name}}"
	for i := range 200 {
		big.Recipients = append(big.Recipients, submit.Recipient{Account: "acct-a", To: fmt.Sprintf("user-%04d", i), Vars: map[string]string{"name": "Li"}})
	}
	reused := jobBody(3)
	reused.Name = "changed"

	for name, tc := range map[string]struct {
		body   any
		key    string
		status int
		field  string // a field the problem must name
	}{
		"malformed JSON":      {`{"template": "Hi", "recipients": [`, "", 400, ""},
		"not JSON":            {`template=Hi`, "", 400, ""},
		"array body":          {`[{"template": "Hi"}]`, "", 400, ""},
		"null body":           {`null`, "", 400, ""},
		"empty body":          {``, "", 400, ""},
		"trailing data":       {`{"template": "Hi", "recipients": [{"account": "acct-a", "to": "u"}]} x`, "", 400, ""},
		"wrong type":          {`{"template": "Hi", "recipients": [{"account": "acct-a", "to": 7}]}`, "", 400, "recipients.to"},
		"budget as string":    {`{"template": "Hi", "budget": "10", "recipients": [{"account": "acct-a", "to": "u"}]}`, "", 400, "budget"},
		"var as number":       {`{"template": "Hi {{n}}", "recipients": [{"account": "acct-a", "to": "u", "vars": {"n": 1}}]}`, "", 400, "recipients.vars"},
		"unknown field":       {`{"template": "Hi", "recipient": [{"account": "acct-a", "to": "u"}]}`, "", 400, "recipient"},
		"invalid UTF-8":       {[]byte("{\"template\": \"Hi \xff\xfe\", \"recipients\": [{\"account\": \"acct-a\", \"to\": \"u\"}]}"), "", 400, ""},
		"unknown account":     {`{"template": "Hi", "recipients": [{"account": "acct-zz", "to": "u"}]}`, "", 422, "recipients[0].account"},
		"other tenant's acct": {`{"template": "Hi", "recipients": [{"account": "acct-c", "to": "u"}]}`, "", 422, "recipients[0].account"},
		"missing variable": {`{"template": "Hi {{name}}", "recipients": [{"account": "acct-a", "to": "u", "vars": {"name": "Li"}},
			{"account": "acct-a", "to": "v", "vars": {}}]}`, "", 422, "recipients[1].vars.name"},
		"empty recipients":      {`{"template": "Hi", "recipients": []}`, "", 422, "recipients"},
		"no recipients":         {`{"template": "Hi"}`, "", 422, "recipients"},
		"no template":           {`{"recipients": [{"account": "acct-a", "to": "u"}]}`, "", 422, "template"},
		"duplicate-only list":   {`{"template": "Hi", "recipients": [{"account": "acct-a", "to": "blocked-1"}, {"account": "acct-a", "to": "blocked-1"}]}`, "", 422, "recipients"},
		"negative budget":       {`{"template": "Hi", "budget": -1, "recipients": [{"account": "acct-a", "to": "u"}]}`, "", 422, "budget"},
		"oversized body":        {big, "", 413, ""},
		"non-ASCII key":         {jobBody(2), "clé", 400, "Idempotency-Key"},
		"key reused other body": {reused, "used", 409, ""},
	} {
		t.Run(name, func(t *testing.T) {
			before := s.totals()
			var headers []string
			if tc.key != "" {
				headers = []string{"Idempotency-Key", tc.key}
			}
			p := wantProblem(t, s.do("POST", "/v1/jobs", tokenA, tc.body, headers...), tc.status)
			if tc.field != "" && !slices.ContainsFunc(p.Errors, func(f submit.FieldError) bool { return f.Field == tc.field }) {
				t.Errorf("errors %+v do not name %q (detail %q)", p.Errors, tc.field, p.Detail)
			}
			if after := s.totals(); after != before {
				t.Errorf("refused request changed the store: %+v → %+v", before, after)
			}
		})
	}
	// The missing variable names the recipient index and the variable.
	p := wantProblem(t, s.do("POST", "/v1/jobs", tokenA, `{"template": "Hi {{name}}", "recipients": [{"account": "acct-a", "to": "u", "vars": {"name": "Li"}},
		{"account": "acct-a", "to": "v", "vars": {}}]}`), 422)
	if len(p.Errors) != 1 || !strings.Contains(p.Errors[0].Message, "1") || !strings.Contains(p.Errors[0].Message, "name") {
		t.Errorf("missing variable: %+v", p.Errors)
	}
	// The 413 says what the limit is.
	p = wantProblem(t, s.do("POST", "/v1/jobs", tokenA, big), 413)
	if !strings.Contains(p.Detail, "4096") {
		t.Errorf("413 detail = %q", p.Detail)
	}
}

func TestConcurrentSubmitsWithOneKeyMakeOneJob(t *testing.T) {
	s := newStack(t)
	const n = 10
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		ids      = map[string]int{}
		statuses = map[int]int{}
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.do("POST", "/v1/jobs", tokenA, jobBody(40), "Idempotency-Key", "same")
			var j api.Job
			_ = jsonUnmarshal(r.body, &j)
			mu.Lock()
			defer mu.Unlock()
			if r.header.Get("Idempotent-Replayed") == "true" {
				statuses[-r.status]++ // a replay
			} else {
				statuses[r.status]++
			}
			if r.status < 300 {
				ids[j.ID]++
			} else {
				t.Errorf("concurrent submit: %d %s", r.status, r.body)
			}
		}()
	}
	wg.Wait()
	if len(ids) != 1 || statuses[http.StatusAccepted] != 1 || statuses[-http.StatusAccepted] != n-1 {
		t.Errorf("ids %v, statuses %v", ids, statuses)
	}
	if tt := s.totals(); tt.jobs != 1 || tt.items != 40 {
		t.Errorf("totals %+v, want one job of 40 items", tt)
	}
}
