package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/apiclient"
	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestGeneratedClientDrivesEveryOperation runs qunfa dev against the mock
// and calls every operation of the OpenAPI description through the
// generated Go client (apiclient), answers checked by the spec-checking
// transport and by the typed fields the client decodes. It fails when an
// operation of the description was not driven.
func TestGeneratedClientDrivesEveryOperation(t *testing.T) {
	m := startMock(t)
	m.setAccount("acct-fail", map[string]any{"errors": []map[string]any{{"errcode": 81013, "ratio": 1}}})
	d := startDev(t, m, devOptions{Extra: []string{"--allow-private-urls"}})
	ctx := context.Background()
	cl, err := apiclient.NewClientWithResponses(d.URL, apiclient.WithHTTPClient(httpClient),
		apiclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+testToken)
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	called := map[string]bool{}
	// want checks one answer's status and records the operation.
	want := func(op string, r interface {
		StatusCode() int
		GetBody() []byte
	}, err error, status int) {
		t.Helper()
		called[op] = true
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if r.StatusCode() != status {
			t.Fatalf("%s: status %d, want %d: %s", op, r.StatusCode(), status, r.GetBody())
		}
	}

	// Meta.
	h, err := cl.HealthzWithResponse(ctx)
	want("healthz", h, err, 200)
	o, err := cl.GetOpenAPIWithResponse(ctx)
	want("getOpenAPI", o, err, 200)
	o30, err := cl.GetOpenAPI30WithResponse(ctx)
	want("getOpenAPI30", o30, err, 200)
	if !strings.Contains(string(o30.Body), `"openapi": "3.0.3"`) {
		t.Errorf("getOpenAPI30 did not answer the 3.0 rendering")
	}

	// Provider callbacks: no callback token is configured, so no
	// signature verifies (TestWechatMassSend drives them signed).
	echo := "e"
	cc, err := cl.WechatCallbackCheckWithResponse(ctx, "wx-app", &apiclient.WechatCallbackCheckParams{Signature: "00", Timestamp: "1", Nonce: "n", Echostr: &echo})
	want("wechatCallbackCheck", cc, err, 403)
	sig := "00"
	ce, err := cl.WechatCallbackEventWithBodyWithResponse(ctx, "wx-app", &apiclient.WechatCallbackEventParams{Signature: &sig, Timestamp: "1", Nonce: "n"},
		"text/xml", strings.NewReader("<xml><Event>MASSSENDJOBFINISH</Event><MsgID>1</MsgID></xml>"))
	want("wechatCallbackEvent", ce, err, 403)
	wk, err := cl.WecomCallbackCheckWithResponse(ctx, "ww-corp:1000002", &apiclient.WecomCallbackCheckParams{MsgSignature: "00", Timestamp: "1", Nonce: "n", Echostr: "e"})
	want("wecomCallbackCheck", wk, err, 403)
	we, err := cl.WecomCallbackEventWithBodyWithResponse(ctx, "ww-corp:1000002", &apiclient.WecomCallbackEventParams{MsgSignature: "00", Timestamp: "1", Nonce: "n"},
		"text/xml", strings.NewReader("<xml><Encrypt>AAAA</Encrypt></xml>"))
	want("wecomCallbackEvent", we, err, 403)

	// Accounts.
	rate, burst, reserve := 2.0, 2.0, 0.5
	for _, a := range []string{"acct-slow", "acct-fail"} {
		pa, err := cl.PutAccountWithResponse(ctx, a, apiclient.AccountRequest{RatePerSec: rate, Burst: &burst, OnlineReservePerSec: &reserve})
		want("putAccount", pa, err, 200)
		if pa.JSON200.BatchRatePerSec != 1.5 {
			t.Errorf("putAccount: batch rate %v", pa.JSON200.BatchRatePerSec)
		}
	}
	fast := 1000.0
	minGap := int64(0)
	pa, err := cl.PutAccountWithResponse(ctx, "acct-fast", apiclient.AccountRequest{RatePerSec: fast, Burst: &fast,
		Pacing: &apiclient.PacingInput{Mode: apiclient.PacingInputModeRandom, MinGapMs: &minGap}})
	want("putAccount", pa, err, 200)
	if p := pa.JSON200.Pacing; p == nil || p.Mode != apiclient.PacingModeRandom || p.MinGapMs != 0 {
		t.Errorf("putAccount: pacing %+v, want random", p)
	}
	pa, err = cl.PutAccountWithResponse(ctx, "acct-fast", apiclient.AccountRequest{RatePerSec: fast, Burst: &fast})
	want("putAccount", pa, err, 200)
	if pa.JSON200.Pacing != nil {
		t.Errorf("putAccount without pacing: %+v, want the token bucket (null)", *pa.JSON200.Pacing)
	}
	bad, err := cl.PutAccountWithResponse(ctx, "acct-bad", apiclient.AccountRequest{RatePerSec: -1})
	want("putAccount", bad, err, 422)
	if bad.ApplicationproblemJSON422 == nil || len(bad.ApplicationproblemJSON422.Errors) == 0 {
		t.Errorf("putAccount 422: no typed field errors: %s", bad.Body)
	}
	ga, err := cl.GetAccountWithResponse(ctx, "acct-slow")
	want("getAccount", ga, err, 200)
	if ga.JSON200.BreakerState.State != apiclient.Closed {
		t.Errorf("getAccount: breaker %q", ga.JSON200.BreakerState.State)
	}
	la, err := cl.ListAccountsWithResponse(ctx)
	want("listAccounts", la, err, 200)
	if len(la.JSON200.Accounts) != 3 {
		t.Errorf("listAccounts: %d accounts", len(la.JSON200.Accounts))
	}

	// Jobs: submit, idempotent replay (202, Idempotent-Replayed), conflict.
	recipients := func(account string, n int) []apiclient.Recipient {
		out := make([]apiclient.Recipient, n)
		for i := range out {
			ref := account + "-ref-" + string(rune('a'+i))
			out[i] = apiclient.Recipient{Account: account, To: account + "-u" + string(rune('a'+i)), Ref: &ref,
				Vars: &map[string]string{"name": "客户"}}
		}
		return out
	}
	name := "typed client"
	key := "typed-1"
	body := apiclient.JobRequest{Name: &name, Template: "Hi {{name}}", Recipients: ptr(recipients("acct-slow", 20)),
		Metadata: &apiclient.Metadata{"order": "A-1"}}
	sj, err := cl.SubmitJobWithResponse(ctx, &apiclient.SubmitJobParams{IdempotencyKey: &key}, body)
	want("submitJob", sj, err, 202)
	job := sj.JSON202
	if job.Total != 20 || job.PauseReason != nil || job.FinishedAt != nil || job.Metadata["order"] != "A-1" {
		t.Errorf("submitJob: %+v", job)
	}
	if sj.HTTPResponse.Header.Get("Idempotent-Replayed") != "" {
		t.Error("the first submission says it is a replay")
	}
	replay, err := cl.SubmitJobWithResponse(ctx, &apiclient.SubmitJobParams{IdempotencyKey: &key}, body)
	want("submitJob", replay, err, 202)
	if replay.JSON202.Id != job.Id || replay.HTTPResponse.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: id %s (want %s), Idempotent-Replayed %q", replay.JSON202.Id, job.Id, replay.HTTPResponse.Header.Get("Idempotent-Replayed"))
	}
	other := body
	other.Template = "Bye {{name}}"
	conflict, err := cl.SubmitJobWithResponse(ctx, &apiclient.SubmitJobParams{IdempotencyKey: &key}, other)
	want("submitJob", conflict, err, 409)

	// Pause, PATCH, resume, cancel on the slow job.
	pj, err := cl.PauseJobWithResponse(ctx, job.Id)
	want("pauseJob", pj, err, 200)
	if pj.JSON200.Status != "paused" || pj.JSON200.PauseReason == nil || *pj.JSON200.PauseReason != apiclient.Manual {
		t.Errorf("pauseJob: %s %v", pj.JSON200.Status, pj.JSON200.PauseReason)
	}
	capRate, budget := 1.0, int64(15)
	uj, err := cl.UpdateJobLimitsWithResponse(ctx, job.Id, apiclient.LimitsRequest{RatePerSec: &capRate, Budget: &budget})
	want("updateJobLimits", uj, err, 200)
	if uj.JSON200.RatePerSec != 1 || uj.JSON200.Budget != 15 {
		t.Errorf("updateJobLimits: rate %v budget %d", uj.JSON200.RatePerSec, uj.JSON200.Budget)
	}
	rj, err := cl.ResumeJobWithResponse(ctx, job.Id)
	want("resumeJob", rj, err, 200)
	if rj.JSON200.PauseReason != nil {
		t.Errorf("resumeJob: pause reason %v", *rj.JSON200.PauseReason)
	}
	cj, err := cl.CancelJobWithResponse(ctx, job.Id)
	want("cancelJob", cj, err, 200)
	if cj.JSON200.Status != "cancelled" || cj.JSON200.FinishedAt == nil {
		t.Errorf("cancelJob: %s finished %v", cj.JSON200.Status, cj.JSON200.FinishedAt)
	}
	late, err := cl.UpdateJobLimitsWithResponse(ctx, job.Id, apiclient.LimitsRequest{Budget: &budget})
	want("updateJobLimits", late, err, 409)

	// A job that fails on acct-fail and completes on acct-fast: items,
	// filters, redrive, resolve.
	mixed := append(recipients("acct-fail", 3), recipients("acct-fast", 4)...)
	sj2, err := cl.SubmitJobWithResponse(ctx, nil, apiclient.JobRequest{Template: "Hi {{name}}", Recipients: &mixed})
	want("submitJob", sj2, err, 202)
	id2 := sj2.JSON202.Id
	var final apiclient.Job
	if !poll(60*time.Second, 100*time.Millisecond, func() bool {
		g, err := cl.GetJobWithResponse(ctx, id2)
		want("getJob", g, err, 200)
		final = *g.JSON200
		return final.FinishedAt != nil
	}) {
		t.Fatalf("the mixed job did not finish: %+v", final)
	}
	if final.Status != "partial" || final.Counts.Confirmed != 4 || final.Counts.Failed != 3 || final.Failures["permanent"] != 3 {
		t.Errorf("mixed job: %s %+v %v", final.Status, final.Counts, final.Failures)
	}
	permanent := apiclient.ErrorCategory("permanent")
	li, err := cl.ListItemsWithResponse(ctx, id2, &apiclient.ListItemsParams{Category: &permanent})
	want("listItems", li, err, 200)
	if len(li.JSON200.Items) != 3 || li.JSON200.Items[0].Error == nil || li.JSON200.Items[0].Error.Category != permanent {
		t.Errorf("listItems category=permanent: %+v", li.JSON200.Items)
	}
	ref := "acct-fast-ref-b"
	byRef, err := cl.ListItemsWithResponse(ctx, id2, &apiclient.ListItemsParams{Ref: &ref})
	want("listItems", byRef, err, 200)
	confirmed := apiclient.ItemStatus("confirmed")
	byStatus, err := cl.ListItemsWithResponse(ctx, id2, &apiclient.ListItemsParams{Status: &confirmed})
	want("listItems", byStatus, err, 200)
	if len(byStatus.JSON200.Items) != 4 {
		t.Fatalf("listItems status=confirmed: %+v", byStatus.JSON200.Items)
	}
	if len(byRef.JSON200.Items) != 1 {
		t.Fatalf("listItems ref: %+v", byRef.JSON200.Items)
	}
	it := byRef.JSON200.Items[0]
	if it.Status != "confirmed" || it.Msgid == "" || it.SubmittedAt == nil || it.FinishedAt == nil || it.Error != nil {
		t.Errorf("a confirmed item: %+v", it)
	}
	var limit int64 = 2
	page, err := cl.ListItemsWithResponse(ctx, id2, &apiclient.ListItemsParams{Limit: &limit})
	want("listItems", page, err, 200)
	if len(page.JSON200.Items) != 2 || page.JSON200.NextCursor == "" {
		t.Errorf("listItems limit 2: %d items, cursor %q", len(page.JSON200.Items), page.JSON200.NextCursor)
	}
	rs, err := cl.ResolveItemWithResponse(ctx, id2, it.Seq, apiclient.ResolveRequest{Outcome: apiclient.ResolveRequestOutcomeDelivered})
	want("resolveItem", rs, err, 409) // not under review
	rs404, err := cl.ResolveItemWithResponse(ctx, id2, 9999, apiclient.ResolveRequest{Outcome: apiclient.ResolveRequestOutcomeResend})
	want("resolveItem", rs404, err, 404)
	if rs404.ApplicationproblemJSON404 == nil || rs404.ApplicationproblemJSON404.Title == "" {
		t.Errorf("resolveItem 404: no typed problem: %s", rs404.Body)
	}
	m.setAccount("acct-fail", map[string]any{"errors": []map[string]any{}})
	rd, err := cl.RedriveJobWithResponse(ctx, id2, apiclient.RedriveRequest{Category: permanent})
	want("redriveJob", rd, err, 200)
	if rd.JSON200.Redriven != 3 {
		t.Errorf("redriveJob: %d redriven", rd.JSON200.Redriven)
	}
	if !poll(60*time.Second, 100*time.Millisecond, func() bool {
		g, err := cl.GetJobWithResponse(ctx, id2)
		want("getJob", g, err, 200)
		final = *g.JSON200
		return final.Status == "completed"
	}) {
		t.Errorf("the redriven job did not complete: %s %+v", final.Status, final.Counts)
	}

	lj, err := cl.ListJobsWithResponse(ctx, &apiclient.ListJobsParams{})
	want("listJobs", lj, err, 200)
	if len(lj.JSON200.Jobs) != 2 || lj.JSON200.Jobs[0].Id != id2 {
		t.Errorf("listJobs: not the two jobs newest first")
	}
	gone, err := cl.GetJobWithResponse(ctx, "nope")
	want("getJob", gone, err, 404)

	// Suppressions.
	reason := "asked to stop"
	sr, err := cl.SuppressRecipientWithResponse(ctx, "acct-fast", "u-stop", apiclient.SuppressionRequest{Reason: &reason})
	want("suppressRecipient", sr, err, 200)
	imp, err := cl.ImportSuppressionsWithResponse(ctx, apiclient.SuppressionImport{Entries: []apiclient.SuppressionEntry{
		{Account: "acct-fast", To: "u-x"}, {Account: "acct-fast", To: "u-y"}}})
	want("importSuppressions", imp, err, 200)
	if imp.JSON200.Added != 2 {
		t.Errorf("importSuppressions: added %d", imp.JSON200.Added)
	}
	ls, err := cl.ListSuppressionsWithResponse(ctx, nil)
	want("listSuppressions", ls, err, 200)
	if len(ls.JSON200.Suppressions) != 3 {
		t.Errorf("listSuppressions: %d", len(ls.JSON200.Suppressions))
	}
	us, err := cl.UnsuppressRecipientWithResponse(ctx, "acct-fast", "u-x")
	want("unsuppressRecipient", us, err, 204)

	// Campaigns.
	enabled := false
	cp, err := cl.PutCampaignWithResponse(ctx, apiclient.CampaignRequest{Name: "weekly", Schedule: "cron(0 9 ? * MON *)",
		Timezone: ptr("Asia/Shanghai"), Mode: apiclient.CampaignRequestModeSnapshot, Enabled: &enabled,
		Request: apiclient.CampaignJobRequest{Template: "Hi {{name}}", Recipients: ptr(recipients("acct-fast", 2))}})
	want("putCampaign", cp, err, 201)
	camp := cp.JSON201
	gc, err := cl.GetCampaignWithResponse(ctx, camp.Id)
	want("getCampaign", gc, err, 200)
	if gc.JSON200.Name != "weekly" || gc.JSON200.Enabled || gc.JSON200.Timezone != "Asia/Shanghai" {
		t.Errorf("getCampaign: %+v", gc.JSON200)
	}
	lc, err := cl.ListCampaignsWithResponse(ctx)
	want("listCampaigns", lc, err, 200)
	if len(lc.JSON200.Campaigns) != 1 {
		t.Errorf("listCampaigns: %d", len(lc.JSON200.Campaigns))
	}
	dc, err := cl.DeleteCampaignWithResponse(ctx, camp.Id)
	want("deleteCampaign", dc, err, 204)

	// Webhooks: a receiver that takes everything; a job's events reach it.
	recv := startReceiver(t, "a-long-random-secret", 0)
	secret := "a-long-random-secret"
	cw, err := cl.CreateWebhookWithResponse(ctx, apiclient.WebhookRequest{Url: recv.URL, Secret: &secret,
		Events: []apiclient.WebhookEventType{apiclient.JobStarted, apiclient.JobFinished}})
	want("createWebhook", cw, err, 201)
	hook := cw.JSON201
	lw, err := cl.ListWebhooksWithResponse(ctx)
	want("listWebhooks", lw, err, 200)
	if len(lw.JSON200.Webhooks) != 1 || lw.JSON200.Webhooks[0].Id != hook.Id {
		t.Errorf("listWebhooks: %+v", lw.JSON200.Webhooks)
	}
	sj3, err := cl.SubmitJobWithResponse(ctx, nil, apiclient.JobRequest{Template: "Hi {{name}}", Recipients: ptr(recipients("acct-fast", 2))})
	want("submitJob", sj3, err, 202)
	var deliveries []apiclient.WebhookDelivery
	if !poll(60*time.Second, 200*time.Millisecond, func() bool {
		ld, err := cl.ListWebhookDeliveriesWithResponse(ctx, hook.Id, nil)
		want("listWebhookDeliveries", ld, err, 200)
		deliveries = ld.JSON200.Deliveries
		delivered := 0
		for _, d := range deliveries {
			if d.Status == apiclient.WebhookDeliveryStatusDelivered {
				delivered++
			}
		}
		return delivered >= 2
	}) {
		t.Fatalf("no two delivered webhook deliveries: %+v", deliveries)
	}
	again, err := cl.RedeliverWebhookDeliveryWithResponse(ctx, hook.Id, deliveries[0].Id)
	want("redeliverWebhookDelivery", again, err, 202)
	if again.JSON202.Id != deliveries[0].Id {
		t.Errorf("redeliver: %+v", again.JSON202)
	}
	dw, err := cl.DeleteWebhookWithResponse(ctx, hook.Id)
	want("deleteWebhook", dw, err, 204)

	// Preview: what a job would send, nothing sent or stored.
	pv, err := cl.PreviewJobWithResponse(ctx, apiclient.JobRequest{Name: &name, Template: "Hi {{name}}", Recipients: &[]apiclient.Recipient{
		{Account: "acct-fast", To: "pv-1", Vars: &map[string]string{"name": "A"}},
		{Account: "acct-fast", To: "pv-1", Vars: &map[string]string{"name": "A"}},
	}})
	want("previewJob", pv, err, 200)
	if pv.JSON200 == nil || pv.JSON200.Total != 1 || pv.JSON200.Dropped.Duplicate != 1 || len(pv.JSON200.Samples) != 1 ||
		pv.JSON200.Samples[0].Content != "Hi A" || len(pv.JSON200.ByAccount) != 1 {
		t.Errorf("previewJob: %s", pv.Body)
	}

	// Staged submission: a staging job, two parts in two formats, start.
	stagedKey, staged := "typed-staged", true
	sg, err := cl.SubmitJobWithResponse(ctx, &apiclient.SubmitJobParams{IdempotencyKey: &stagedKey},
		apiclient.JobRequest{Name: &name, Template: "Hi {{name}}", Staged: &staged})
	want("submitJob", sg, err, 201)
	if sg.JSON201 == nil || sg.JSON201.Status != "staging" {
		t.Fatalf("staged job: %s", sg.Body)
	}
	ndjson := "{\"account\":\"acct-fast\",\"to\":\"st-1\",\"vars\":{\"name\":\"A\"}}\n{\"account\":\"acct-fast\",\"to\":\"st-2\",\"vars\":{\"name\":\"B\"}}\n"
	p1, err := cl.PutJobRecipientsWithBodyWithResponse(ctx, sg.JSON201.Id, 1, "application/x-ndjson", strings.NewReader(ndjson))
	want("putJobRecipients", p1, err, 200)
	csv := "account,to,var.name\nacct-fast,st-2,B\nacct-fast,st-3,C\n"
	p2, err := cl.PutJobRecipientsWithBodyWithResponse(ctx, sg.JSON201.Id, 2, "text/csv", strings.NewReader(csv))
	want("putJobRecipients", p2, err, 200)
	if p1.JSON200.Recipients != 2 || p2.JSON200.Recipients != 2 {
		t.Errorf("parts: %s / %s", p1.Body, p2.Body)
	}
	lp, err := cl.ListJobPartsWithResponse(ctx, sg.JSON201.Id)
	want("listJobParts", lp, err, 200)
	if lp.JSON200 == nil || len(lp.JSON200.Parts) != 2 || lp.JSON200.Parts[0].Part != 1 || lp.JSON200.Parts[1].Bytes != int64(len(csv)) ||
		lp.JSON200.Parts[1].Digest != submit.PartDigest("text/csv", []byte(csv)) {
		t.Errorf("listJobParts: %s", lp.Body)
	}
	spv, err := cl.PreviewStagedJobWithResponse(ctx, sg.JSON201.Id)
	want("previewStagedJob", spv, err, 200)
	if spv.JSON200 == nil || spv.JSON200.Total != 3 || spv.JSON200.Dropped.Duplicate != 1 {
		t.Errorf("previewStagedJob: %s", spv.Body)
	}
	st, err := cl.StartJobWithResponse(ctx, sg.JSON201.Id, apiclient.StartRequest{Parts: 2})
	want("startJob", st, err, 202)
	if !poll(30*time.Second, 50*time.Millisecond, func() bool {
		g, err := cl.GetJobWithResponse(ctx, sg.JSON201.Id)
		return err == nil && g.JSON200 != nil && g.JSON200.Status == "completed" && g.JSON200.Total == 3
	}) {
		g, _ := cl.GetJobWithResponse(ctx, sg.JSON201.Id)
		t.Errorf("the staged job (duplicate across parts) did not complete with 3 recipients: %s", g.Body)
	}

	// Per-minute series of a job and of an account.
	js, err := cl.GetJobSeriesWithResponse(ctx, sg.JSON201.Id, nil)
	want("getJobSeries", js, err, 200)
	as, err := cl.GetAccountSeriesWithResponse(ctx, "acct-fast", nil)
	want("getAccountSeries", as, err, 200)
	if js.JSON200 == nil || as.JSON200 == nil || as.JSON200.Account != "acct-fast" {
		t.Errorf("series: %s / %s", js.Body, as.Body)
	}
	// The breaker of an account that never tripped has no history.
	bh, err := cl.GetBreakerHistoryWithResponse(ctx, "acct-fast")
	want("getBreakerHistory", bh, err, 200)
	if bh.JSON200 == nil || bh.JSON200.Account != "acct-fast" || len(bh.JSON200.Transitions) != 0 {
		t.Errorf("breaker history: %s", bh.Body)
	}

	// Tokens of the tenant, and the platform operator's calls.
	ct, err := cl.CreateTokenWithResponse(ctx, apiclient.TokenRequest{Name: "reader", Role: apiclient.Read})
	want("createToken", ct, err, 201)
	lt, err := cl.ListTokensWithResponse(ctx)
	want("listTokens", lt, err, 200)
	if lt.JSON200 == nil || len(lt.JSON200.Tokens) < 2 || strings.Contains(string(lt.Body), ct.JSON201.Token) {
		t.Errorf("listTokens: %s", lt.Body)
	}
	dt, err := cl.DeleteTokenWithResponse(ctx, ct.JSON201.Id)
	want("deleteToken", dt, err, 204)
	platform, err := apiclient.NewClientWithResponses(d.URL, apiclient.WithHTTPClient(httpClient),
		apiclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+testAdminToken)
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	ga2, err := platform.GrantAccountWithResponse(ctx, "tenant-z", "acct-z")
	want("grantAccount", ga2, err, 200)
	tt, err := platform.CreateTenantTokenWithResponse(ctx, "tenant-z", apiclient.TokenRequest{Name: "first", Role: apiclient.Admin})
	want("createTenantToken", tt, err, 201)
	if tt.JSON201 == nil || tt.JSON201.Token == "" {
		t.Errorf("createTenantToken: %s", tt.Body)
	}
	pq, err := platform.PutTenantQuotaWithResponse(ctx, "tenant-z", apiclient.QuotaRequest{MaxRunningJobs: 3, MaxRecipientsPerDay: 1000})
	want("putTenantQuota", pq, err, 200)
	gq, err := platform.GetTenantQuotaWithResponse(ctx, "tenant-z")
	want("getTenantQuota", gq, err, 200)
	if gq.JSON200 == nil || gq.JSON200.MaxRunningJobs != 3 || gq.JSON200.MaxRecipientsPerDay != 1000 {
		t.Errorf("getTenantQuota: %s", gq.Body)
	}

	// The audit log (admin): the calls above are in it.
	al, err := cl.ListAuditWithResponse(ctx, &apiclient.ListAuditParams{Job: &job.Id})
	want("listAudit", al, err, 200)
	if al.JSON200 == nil || len(al.JSON200.Entries) == 0 {
		t.Errorf("listAudit: no entries for job %s: %s", job.Id, al.Body)
	}

	// Every operation of the description was driven.
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPISpec(), &doc); err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, item := range doc.Paths {
		for method, raw := range item {
			if !slices.Contains([]string{"get", "put", "post", "patch", "delete"}, method) {
				continue
			}
			var op struct {
				OperationID string `json:"operationId"`
			}
			_ = json.Unmarshal(raw, &op)
			if !called[op.OperationID] {
				missing = append(missing, op.OperationID)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("operations not driven through the generated client: %v", missing)
	}
}

func ptr[T any](v T) *T { return &v }
