package browser

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardPages opens every page in English and in 中文 against a
// live stack with a campaign, a suppression list, a webhook with
// deliveries and a job with failures, retries and sends per minute;
// checks each shows its data and no untranslated key; drives the new
// forms (job from a CSV upload, campaign, suppression add and import,
// webhook, redeliver); and saves a screenshot of each page in each
// language.
func TestDashboardPages(t *testing.T) {
	chromium := chromiumPath(t)
	artifacts := artifactsDir(t)
	bin := buildQunfa(t)
	st := startStack(t, bin)

	// A receiver that refuses its first delivery, so one shows failed.
	var calls atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	var hook struct {
		ID string `json:"id"`
	}
	st.call("POST", "/v1/webhooks", map[string]any{"url": recv.URL + "/events", "events": []string{"job.started", "job.finished"}, "secret": "s3cret-s3cret-s3cret"}, &hook)

	const account = "acct-pages"
	st.call("PUT", "/v1/accounts/"+account, map[string]any{"rate_per_sec": 12, "burst": 4, "online_reserve_per_sec": 2, "max_recipients_per_call": 1,
		"breaker": map[string]any{"consecutive_failures": 0, "failure_rate": 0, "min_samples": 0, "cooldown_sec": 0}}, nil)
	st.mock("PUT", "/_mock/accounts/"+account, map[string]any{"errors": []map[string]any{{"errcode": 81013, "ratio": 0.2}, {"errcode": -1, "ratio": 0.2}}})
	st.call("POST", "/v1/campaigns", map[string]any{"id": "weekly", "name": "Weekly digest", "schedule": "cron(0 9 ? * MON *)", "mode": "snapshot",
		"request": map[string]any{"template": "Hi", "recipients": []map[string]any{{"account": account, "to": "u1"}}}}, nil)
	st.call("PUT", "/v1/suppressions/"+account+"/blocked-1", map[string]any{"reason": "complaint"}, nil)
	// An account whose credential the provider refuses: its breaker opens
	// at the first send, so the accounts page has a history to show.
	const downAccount = "acct-down"
	st.call("PUT", "/v1/accounts/"+downAccount, map[string]any{"rate_per_sec": 5, "burst": 5, "online_reserve_per_sec": 0, "max_recipients_per_call": 1,
		"breaker": map[string]any{"consecutive_failures": 3, "failure_rate": 0, "min_samples": 0, "cooldown_sec": 600}}, nil)
	st.mock("PUT", "/_mock/accounts/"+downAccount, map[string]any{"errors": []map[string]any{{"errcode": 40001, "ratio": 1}}})
	st.call("POST", "/v1/jobs", map[string]any{"name": "Refused credential", "template": "Hi", "recipients": []map[string]any{
		{"account": downAccount, "to": "d1"}, {"account": downAccount, "to": "d2"}}}, nil)

	b := &tab{t: t, ctx: newBrowser(t, chromium), artifacts: artifacts}
	b.do("open the dashboard", chromedp.Navigate(st.apiURL+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	if got := evalJS[string](b, `location.pathname`); got != "/ui/" {
		t.Fatalf("/ led to %q, want the dashboard at /ui/", got)
	}
	b.do("log in", chromedp.SendKeys(chromedp.CSS("#token"), testToken), chromedp.Click(chromedp.CSS("#login-submit")))
	b.waitJS("logged in", `document.getElementById('jobs-table') !== null`)

	// A job from a CSV upload: too big first, then right.
	var csv strings.Builder
	csv.WriteString("account,to,ref,var.name\n")
	for i := range 120 {
		fmt.Fprintf(&csv, "%s,page-user-%03d,ref-%d,\"Li, %d\"\n", account, i, i, i)
	}
	csvPath := filepath.Join(t.TempDir(), "recipients.csv")
	if err := os.WriteFile(csvPath, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	b.do("open new job", chromedp.Click(chromedp.CSS("#nav-new-job")), chromedp.WaitVisible(chromedp.CSS("#newjob-file")))
	evalJS[int](b, `window.qunfa.csvMaxBytes = 1024`)
	b.do("upload a file over the cap", chromedp.SetUploadFiles(chromedp.CSS("#newjob-file"), []string{csvPath}))
	b.waitJS("the cap is explained", `document.getElementById('newjob-msg').textContent.includes('qunfa submit')`)
	evalJS[int](b, `window.qunfa.csvMaxBytes = 4 << 20`)
	evalJS[string](b, `document.getElementById('newjob-file').value = ''`)
	b.do("fill the job", chromedp.SendKeys(chromedp.CSS("#newjob-name"), "CSV upload job"),
		chromedp.SendKeys(chromedp.CSS("#newjob-template"), "{{name}}，您好"),
		chromedp.SetUploadFiles(chromedp.CSS("#newjob-file"), []string{csvPath}))
	b.waitJS("the CSV is read", `(document.getElementById('newjob-count')?.textContent || '').includes('120')`)
	shot(t, b, artifacts, "newjob", "en")
	b.do("send", chromedp.Click(chromedp.CSS("#newjob-submit")))
	b.waitJS("the job page opens", `location.hash.startsWith('#/jobs/') && !!document.getElementById('job-status')?.dataset.status`)
	jobID := strings.TrimPrefix(evalJS[string](b, `decodeURIComponent(location.hash)`), "#/jobs/")
	if j := st.job(jobID); j.Total != 120 {
		t.Fatalf("the uploaded job has %d items, want 120", j.Total)
	}

	// The job's summary in words, and failures per minute from the series.
	b.waitJS("failures are charted from the series", `document.querySelector('#fail-chart polyline') !== null`)
	// 120 recipients at 10/s, a fifth answered "busy" and sent again with
	// backoff: about 15 s of sending at best.
	b.waitJSFor("the job finishes", `['completed','partial'].includes(document.getElementById('job-status').dataset.status)`, time.Minute)
	var full struct {
		job
		ConfirmedAfterRetry int64 `json:"confirmed_after_retry"`
	}
	st.call("GET", "/v1/jobs/"+jobID, nil, &full)
	want := fmt.Sprintf("%d delivered, %d failed; %d of the delivered needed retries; %d need a person",
		full.Counts["confirmed"], full.Counts["failed"], full.ConfirmedAfterRetry, full.Failures["uncertain"]+full.Failures["exhausted"])
	b.waitJS("the summary says it in words", fmt.Sprintf(`document.getElementById('job-words').textContent === %q`, want))
	if full.ConfirmedAfterRetry == 0 {
		t.Fatalf("no item needed a retry with 20%% busy answers: %+v", full)
	}
	b.do("reload", chromedp.Reload())
	b.waitJS("the chart survives a reload", `document.querySelector('#fail-chart polyline') !== null`)

	// Campaigns: create one from the form; next firings; the seeded one.
	b.do("open campaigns", chromedp.Click(chromedp.CSS("#nav-campaigns")), chromedp.WaitVisible(chromedp.CSS("#campaign-form")))
	b.waitJS("the campaign is listed", `document.querySelector('tr[data-campaign=weekly] .next')?.textContent.length > 1`)
	// The stack's default zone (qunfa dev: UTC), which a campaign without
	// its own follows: under the form's time zone and in the list.
	b.waitJS("the form and the list tell the stack's default zone", `document.getElementById('camp-timezone-default')?.textContent === "Empty: the stack's default time zone, UTC." &&
		document.getElementById('camp-timezone').placeholder === 'UTC' &&
		document.querySelector('tr[data-campaign=weekly] .schedule')?.textContent === 'cron(0 9 ? * MON *) · UTC (default)'`)
	b.do("fill a campaign", chromedp.SendKeys(chromedp.CSS("#camp-id"), "hourly"), chromedp.SendKeys(chromedp.CSS("#camp-name"), "Hourly"),
		chromedp.SendKeys(chromedp.CSS("#camp-schedule"), "rate(1 hour)"), chromedp.SendKeys(chromedp.CSS("#camp-template"), "Hi {{name}}"),
		chromedp.SendKeys(chromedp.CSS("#camp-recipients"), "account,to,var.name\n"+account+",c1,Li\n"),
		chromedp.Click(chromedp.CSS("#campaign-create")))
	b.waitJS("the new campaign is listed", `document.querySelector('tr[data-campaign=hourly]') !== null`)
	b.do("open the campaign", chromedp.Click(chromedp.CSS(`tr[data-campaign=weekly] a`)))
	b.waitJS("five next firings, Mondays 09:00 UTC", `(() => { const li = [...document.querySelectorAll('#campaign-next li[data-at]')];
		return li.length === 5 && li.every((e) => { const d = new Date(e.dataset.at); return d.getUTCDay() === 1 && d.getUTCHours() === 9 && d.getUTCMinutes() === 0; }); })()`)
	b.waitJS("its facts name the stack's default zone", `document.getElementById('campaign-facts').textContent.includes("the stack's default, UTC")`)
	// A campaign in its own time zone: 09:00 on Mondays in New York, on
	// both sides of any daylight-saving change among the next five.
	b.do("back to campaigns", chromedp.Click(chromedp.CSS("#nav-campaigns")), chromedp.WaitVisible(chromedp.CSS("#campaign-form")))
	b.do("fill a campaign in New York time", chromedp.SendKeys(chromedp.CSS("#camp-id"), "ny"), chromedp.SendKeys(chromedp.CSS("#camp-name"), "NY"),
		chromedp.SendKeys(chromedp.CSS("#camp-schedule"), "cron(0 9 ? * MON *)"), chromedp.SendKeys(chromedp.CSS("#camp-timezone"), "America/New_York"),
		chromedp.SendKeys(chromedp.CSS("#camp-template"), "Hi {{name}}"),
		chromedp.SendKeys(chromedp.CSS("#camp-recipients"), "account,to,var.name\n"+account+",c1,Li\n"),
		chromedp.Click(chromedp.CSS("#campaign-create")))
	b.waitJS("the New York campaign is listed with its zone", `document.querySelector('tr[data-campaign=ny] .schedule')?.textContent.includes('America/New_York')`)
	b.do("open the New York campaign", chromedp.Click(chromedp.CSS(`tr[data-campaign=ny] a`)))
	b.waitJS("five next firings, Mondays 09:00 in New York", `(() => { const li = [...document.querySelectorAll('#campaign-next li[data-at]')];
		const f = new Intl.DateTimeFormat('en-US', { timeZone: 'America/New_York', weekday: 'short', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
		return li.length === 5 && li.every((e) => f.format(new Date(e.dataset.at)) === 'Mon 09:00'); })()`)
	b.waitJS("its facts name the zone", `document.getElementById('campaign-facts').textContent.includes('America/New_York')`)

	// Suppressions: search, add, import.
	b.do("open suppressions", chromedp.Click(chromedp.CSS("#nav-suppressions")))
	b.waitJS("the entry is listed", `document.querySelector('#supp-body tr[data-to=blocked-1]') !== null`)
	b.do("add one", chromedp.SendKeys(chromedp.CSS("#supp-account"), account), chromedp.SendKeys(chromedp.CSS("#supp-to"), "added-1"),
		chromedp.Click(chromedp.CSS("#supp-add button[type=submit]")))
	b.waitJS("the added entry is listed", `document.querySelector('#supp-body tr[data-to=added-1]') !== null`)
	impPath := filepath.Join(t.TempDir(), "supp.csv")
	if err := os.WriteFile(impPath, []byte("account,to,reason\n"+account+",imp-1,unsubscribed\n"+account+",imp-2,\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b.do("import a CSV", chromedp.SetUploadFiles(chromedp.CSS("#supp-file"), []string{impPath}), chromedp.Click(chromedp.CSS("#supp-import button[type=submit]")))
	b.waitJS("imported entries are listed", `document.querySelector('#supp-body tr[data-to=imp-2]') !== null`)
	b.do("search", chromedp.SendKeys(chromedp.CSS("#supp-search"), "imp-"), chromedp.Click(chromedp.CSS("#supp-search-form button")))
	b.waitJS("search finds only matches", `(() => { const r = [...document.querySelectorAll('#supp-body tr')]; return r.length === 2 && r.every((e) => e.dataset.to.startsWith('imp-')); })()`)

	// Webhooks: the seeded one with deliveries, redeliver; create one.
	b.do("open webhooks", chromedp.Click(chromedp.CSS("#nav-webhooks")))
	b.waitJS("the webhook is listed", fmt.Sprintf(`document.querySelector('tr[data-webhook=%q]') !== null`, hook.ID))
	b.do("open its deliveries", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-webhook=%q] a`, hook.ID))))
	b.waitJS("deliveries show with status", `[...document.querySelectorAll('#deliveries-body tr')].some((r) => r.dataset.status === 'delivered')`)
	b.do("redeliver", chromedp.Click(chromedp.CSS(`#deliveries-body tr button.redeliver`)))
	b.waitJS("redelivery is confirmed", `document.getElementById('delivery-msg').textContent.includes('queued again')`)

	// A WeCom group robot from the form: robot events offered, no secret,
	// the key masked in the list.
	b.do("back to webhooks", chromedp.Click(chromedp.CSS("#nav-webhooks")))
	b.waitJS("the form is shown", `document.getElementById('hook-kind') !== null`)
	b.choose("#hook-kind", "wecom_robot")
	b.waitJS("robot events are offered, no secret", `document.querySelector('#hook-events input[value="breaker.opened"]')?.checked === true
		&& document.querySelector('#hook-events input[value="items.outcomes"]') === null && document.getElementById('hook-secret-in').closest('.field').hidden`)
	b.do("enter the robot's URL", chromedp.SendKeys(`#hook-url`, recv.URL+"/cgi-bin/webhook/send?key=dashboard-robot-key"))
	b.do("add the robot", chromedp.Click(chromedp.CSS("#hook-create")))
	b.waitJS("the robot is listed, its key masked", `(() => { const r = document.querySelector('#hooks-body tr[data-kind="wecom_robot"]');
		return !!r && r.textContent.includes('key=%2A%2A%2A%2A-key') && !document.body.innerText.includes('dashboard-robot-key'); })()`)

	// Tokens: create one (its secret shown once), see it listed, revoke it.
	b.do("open tokens", chromedp.Click(chromedp.CSS("#nav-tokens")))
	b.waitJS("the tokens are listed", `document.querySelectorAll('#tokens-body tr').length > 0`)
	b.do("name a token", chromedp.SendKeys(`#tok-form input[name=name]`, "dashboard reader"))
	b.choose("#tok-role", "read")
	b.do("create it", chromedp.Click(chromedp.CSS("#tok-create")))
	b.waitJS("its secret is shown once", `document.getElementById('tok-secret').textContent.includes('qf_')`)
	b.waitJS("it is listed", `[...document.querySelectorAll('#tokens-body tr')].some((r) => r.textContent.includes('dashboard reader'))`)
	evalJS[bool](b, `(() => { [...document.querySelectorAll('#tokens-body tr')].find((r) => r.textContent.includes('dashboard reader')).querySelector('button.revoke').click(); return true; })()`)
	b.waitJS("the revoke dialog opens", `document.getElementById('confirm').open`)
	b.do("confirm the revoke", chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitJS("it is gone", `![...document.querySelectorAll('#tokens-body tr')].some((r) => r.textContent.includes('dashboard reader'))`)

	// Accounts: send rate against the batch rate.
	b.do("open accounts", chromedp.Click(chromedp.CSS("#nav-accounts")))
	sel := `section[data-account="` + account + `"]`
	b.waitJS("the rate is shown against the batch rate", `(() => { const e = document.querySelector('`+sel+` .rate-now'); return e && e.dataset.batch === '10'; })()`)
	b.waitJS("the chart has the batch-rate line and sends", `document.querySelector('`+sel+` .rate-chart line.limit') !== null && document.querySelector('`+sel+` .rate-chart polyline') !== null`)
	// Breaker history: none for the healthy account; the refused one's
	// breaker opened, with its cool-down end.
	b.waitJS("the healthy account's breaker has no history", `!document.querySelector('`+sel+` .history-none').hidden && document.querySelectorAll('`+sel+` .history-body tr').length === 0`)
	downSel := `section[data-account="` + downAccount + `"]`
	b.waitJS("the refused account's breaker opened in its history", `(() => { const r = document.querySelector('`+downSel+` .history-body tr[data-to="open"]');
		return !!r && r.children[1].textContent === 'Closed (sending) → Open (paused)' && r.children[2].textContent.includes('paused until')
			&& r.children[3].textContent.length > 0; })()`)
	// The sizing the senders chose: one recipient per call on this
	// account, once measured; until then the 80% it starts from.
	b.waitJS("the batch size and concurrency are shown", `(() => { const e = document.querySelector('`+sel+` dd.sizing');
		return e && e.textContent.length > 0 && (e.dataset.batch === '' || (e.dataset.batch === '1' && Number(e.dataset.concurrency) >= 1)); })()`)
	b.waitJS("the account's pacing is shown: the token bucket", `document.querySelector('`+sel+` dd.pacing').textContent.includes('token bucket')`)
	// Settings the form does not edit survive a save from it.
	kept := map[string]any{"pacing": map[string]any{"mode": "random", "min_gap_ms": 30}, "warmup_sec": 600,
		"frequency_cap": map[string]any{"max": 2, "window_sec": 86400}, "max_content_bytes": 2048}
	put := map[string]any{"rate_per_sec": 12, "burst": 4, "online_reserve_per_sec": 2}
	maps.Copy(put, kept)
	st.call("PUT", "/v1/accounts/"+account, put, nil)
	b.do("reload accounts", chromedp.Reload())
	b.waitJS("random pacing is shown with its min gap", `(() => { const e = document.querySelector('`+sel+` dd.pacing'); return e && e.textContent.includes('random gaps') && e.textContent.includes('30 ms'); })()`)
	evalJS[bool](b, `(() => { const i = document.querySelector('`+sel+` form input[name=burst]'); i.value = '5';
		i.dispatchEvent(new Event('input', { bubbles: true })); return true; })()`)
	b.do("save the account from its form", chromedp.Click(chromedp.CSS(sel+` form button[type=submit]`)))
	b.waitJS("saving from the form keeps the pacing", `document.querySelector('`+sel+` .msg').textContent !== '' && document.querySelector('`+sel+` dd.pacing').textContent.includes('30 ms')`)
	var saved map[string]any
	st.call("GET", "/v1/accounts/"+account, nil, &saved)
	if saved["burst"] != 5.0 {
		t.Errorf("burst %v after the form saved 5", saved["burst"])
	}
	jsonText := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for k, want := range kept {
		if got := jsonText(saved[k]); got != jsonText(want) {
			t.Errorf("%s %s after a save from the form, want %s kept", k, got, jsonText(want))
		}
	}

	// Every page in both languages.
	pages := []struct{ name, hash, ready string }{
		{"jobs", "#/jobs", `document.querySelectorAll('#jobs-body tr').length > 0`},
		{"job", "#/jobs/" + jobID, `document.getElementById('job-words')?.textContent.length > 0`},
		{"newjob", "#/new-job", `document.getElementById('newjob-form') !== null`},
		{"campaigns", "#/campaigns", `document.querySelectorAll('#campaigns-body tr').length === 3`},
		{"campaign", "#/campaigns/weekly", `document.querySelectorAll('#campaign-next li').length === 5`},
		{"suppressions", "#/suppressions", `document.querySelectorAll('#supp-body tr').length >= 4`},
		{"webhooks", "#/webhooks", `document.querySelectorAll('#hooks-body tr').length > 0`},
		{"deliveries", "#/webhooks/" + hook.ID, `document.querySelectorAll('#deliveries-body tr').length > 0`},
		{"accounts", "#/accounts", `document.querySelector('.rate-chart svg') !== null && document.querySelector('.history-body tr[data-to="open"]') !== null`},
		{"tokens", "#/tokens", `document.querySelectorAll('#tokens-body tr').length > 0`},
	}
	for _, lang := range []string{"en", "zh"} {
		b.choose("#lang", lang)
		for _, p := range pages {
			b.do("open "+p.name, chromedp.Navigate(st.apiURL+"/ui/"+p.hash))
			b.waitJS(p.name+" in "+lang, p.ready+` && document.documentElement.lang === '`+map[string]string{"en": "en", "zh": "zh-CN"}[lang]+`'`)
			// Event types (job.started…) are data, shown as they are.
			raw := evalJS[string](b, `(document.body.innerText.match(/\b(?:nav|camp|supp|hook|newjob|acct|summary|csv|dstatus|job|jobs|items|act|fail|chart|tok|role)\.[a-zA-Z][\w.]*/g) || [])
				.filter((k) => !/^(job\.(started|paused|canary_ready|finished|dead_letters|items_need_review)|items\.outcomes)$/.test(k))[0] || ''`)
			if raw != "" {
				t.Errorf("%s in %s shows the untranslated key %q", p.name, lang, raw)
			}
			if lang == "zh" {
				// Headings of data (a job's name) stay as given; the page's
				// own headings and the navigation are Chinese.
				if han := evalJS[bool](b, `[...document.querySelectorAll('main h1, main h2, main th, #nav a')].filter((e) => e.textContent.trim())
					.every((e) => /[\u4e00-\u9fff]/.test(e.textContent) || !/[A-Za-z]/.test(e.textContent) || e.id === 'job-name' || e.id === 'campaign-name' || !!e.closest('section.account') || /^(URL|Webhook)$/.test(e.textContent.trim()))`); !han {
					t.Errorf("%s in 中文: a heading is not Chinese: %q", p.name, evalJS[string](b, `[...document.querySelectorAll('main h1, main h2, main th, #nav a')].map((e) => e.textContent.trim()).join(' | ')`))
				}
			}
			shot(t, b, artifacts, p.name, lang)
		}
	}
}

func shot(t *testing.T, b *tab, dir, page, lang string) {
	t.Helper()
	screenshot(t, b.ctx, dir, fmt.Sprintf("pages-%s-%s.png", page, lang))
}
