package browser

import (
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// tab drives the dashboard in one browser tab; every failure saves a
// screenshot of what the page showed.
type tab struct {
	t         *testing.T
	ctx       context.Context
	artifacts string
}

func (b *tab) fail(what string, err error) {
	b.t.Helper()
	name := "failed-" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(what)) + ".png"
	if png, serr := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)); serr == nil {
		_ = os.WriteFile(filepath.Join(b.artifacts, name), png, 0o644)
		b.t.Logf("screenshot of the failure: %s", filepath.Join(b.artifacts, name))
	}
	b.t.Fatalf("%s: %v", what, err)
}

// do runs actions, failing the test after 20 s.
func (b *tab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.fail(what, err)
	}
}

// waitJS waits until a JavaScript expression is truthy.
func (b *tab) waitJS(what, expr string) {
	b.t.Helper()
	b.waitJSFor(what, expr, 20*time.Second)
}

// waitJSFor is waitJS with its own timeout, for what takes long by
// design (a job sending at a limited rate).
func (b *tab) waitJSFor(what, expr string, timeout time.Duration) {
	b.t.Helper()
	_, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr,
		chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(100*time.Millisecond)))
	if err != nil {
		b.fail(what, fmt.Errorf("waiting for %s: %w", expr, err))
	}
}

func evalJS[T any](b *tab, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.fail("evaluate "+expr, err)
	}
	return v
}

// choose picks a value in a <select> as a user would: the change event
// fires.
func (b *tab) choose(sel, value string) {
	b.t.Helper()
	evalJS[bool](b, fmt.Sprintf(`(() => { const s = document.querySelector(%q); s.focus(); s.value = %q;
		s.dispatchEvent(new Event('change', {bubbles: true})); return s.value === %q; })()`, sel, value, value))
}

// typeInto empties a field and types text into it, as a user selecting
// the old value and typing over it.
func (b *tab) typeInto(sel, text string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.focus(); e.value = ''; return true; })()`, sel)))
			return err
		}),
		chromedp.SendKeys(chromedp.CSS(sel), text))
}

// TestDashboard follows an operator through the dashboard against a live
// local stack.
func TestDashboard(t *testing.T) {
	chromium := chromiumPath(t)
	artifacts := artifactsDir(t)
	bin := buildQunfa(t)
	st := startStack(t, bin)

	// An account slow enough that the job lasts the whole test (400 items
	// at 8/s is 50 s), with 30% of recipients rejected as invalid.
	const account = "acct-ui"
	st.call("PUT", "/v1/accounts/"+account, map[string]any{
		"rate_per_sec": 8, "burst": 4, "online_reserve_per_sec": 0, "max_recipients_per_call": 1,
		"breaker": map[string]any{"consecutive_failures": 0, "failure_rate": 0, "min_samples": 0, "cooldown_sec": 0},
	}, nil)
	st.mock("PUT", "/_mock/accounts/"+account, map[string]any{"errors": []map[string]any{{"errcode": 81013, "ratio": 0.3}}})
	var recipients []map[string]any
	for i := range 400 {
		recipients = append(recipients, map[string]any{"account": account, "to": fmt.Sprintf("ui-user-%03d", i), "vars": map[string]string{"name": fmt.Sprintf("客户%03d", i)}})
	}
	var submitted job
	st.call("POST", "/v1/jobs", map[string]any{"name": "Browser test campaign", "template": "{{name}}，您好", "recipients": recipients}, &submitted)
	jobID := submitted.ID

	b := &tab{t: t, ctx: newBrowser(t, chromium), artifacts: artifacts}
	var (
		mu         sync.Mutex
		exceptions []string
	)
	go func() {
		for m, err := range chromedp.Console(b.ctx) {
			if err != nil {
				return
			}
			if m.IsException() {
				mu.Lock()
				exceptions = append(exceptions, m.String())
				mu.Unlock()
			}
		}
	}()

	// Log in with the token.
	b.do("open the dashboard", chromedp.Navigate(st.apiURL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	if got := evalJS[string](b, `document.getElementById('lang').value`); got != "en" {
		t.Fatalf("default language %q, want en (the browser runs with --lang=en-US)", got)
	}
	b.do("log in with a wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "wrong-token"), chromedp.Click(chromedp.CSS("#login-submit")))
	b.waitJS("a refused token is reported", `document.getElementById('login-error').textContent.includes('does not know')`)
	evalJS[string](b, `document.getElementById('token').value = ''`)
	b.do("log in", chromedp.SendKeys(chromedp.CSS("#token"), testToken), chromedp.Click(chromedp.CSS("#login-submit")))
	b.waitJS("the jobs page opens", `location.hash === '#/jobs' && document.getElementById('jobs-table') !== null`)
	if tok := evalJS[string](b, `sessionStorage.getItem('qunfa.token')`); tok != testToken {
		t.Fatalf("sessionStorage holds token %q, want the one entered", tok)
	}

	// The jobs list shows the job with its progress moving.
	row := fmt.Sprintf(`document.querySelector('tr[data-job-id=%q]')`, jobID)
	b.waitJS("the job is listed", row+` && `+row+`.textContent.includes('Browser test campaign')`)
	b.waitJS("the job makes progress", `Number(`+row+`.querySelector('[role=progressbar]').getAttribute('aria-valuenow')) > 0`)
	b.waitJS("an ETA is shown", row+`.querySelector('.eta').textContent.startsWith('about')`)
	shotJobs := screenshot(t, b.ctx, artifacts, "01-jobs-list.png")

	// The job page.
	b.do("open the job", chromedp.Click(chromedp.CSS(`tr[data-job-id="`+jobID+`"] a.job-link`)))
	b.waitJS("the job page shows the job running", `document.querySelector('#job-status')?.dataset.status === 'running'`)
	b.waitJS("per-shard progress is shown", `document.querySelectorAll('#shards-body tr').length === 1 && document.querySelector('#shards-body tr').textContent.includes('acct-ui')`)
	b.waitJS("permanent failures appear", `document.querySelector('#failures-body tr[data-category=permanent]') !== null`)
	b.waitJS("the chart draws them", `document.querySelector('#fail-chart polyline[data-category=permanent]') !== null`)

	// Cancel asks first, says it does not undo what was sent, and Esc backs out.
	b.do("ask to cancel", chromedp.Click(chromedp.CSS("#btn-cancel")))
	b.waitJS("the cancel dialog opens", `document.getElementById('confirm').open`)
	body := evalJS[string](b, `document.getElementById('confirm-body').textContent`)
	if !strings.Contains(body, "abandons the remaining items") || !strings.Contains(body, "does NOT undo") {
		t.Fatalf("the cancel dialog does not say what cancel does: %q", body)
	}
	if id := evalJS[string](b, `document.activeElement.id`); id != "confirm-no" {
		t.Fatalf("focus in the cancel dialog is on %q, want the safe choice #confirm-no", id)
	}
	b.do("tab around the dialog", chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Tab))
	if in := evalJS[bool](b, `document.getElementById('confirm').contains(document.activeElement)`); !in {
		t.Fatal("Tab moved focus out of the open dialog")
	}
	b.do("press Esc", chromedp.KeyEvent(kb.Escape))
	b.waitJS("Esc closes the dialog", `!document.getElementById('confirm').open`)
	if j := st.job(jobID); j.Status != "running" {
		t.Fatalf("after Esc in the cancel dialog the job is %s, want running", j.Status)
	}

	// Pause from the button, confirm, and see the state change.
	b.do("ask to pause", chromedp.Click(chromedp.CSS("#btn-pause")))
	b.waitJS("the pause dialog opens", `document.getElementById('confirm').open`)
	if body := evalJS[string](b, `document.getElementById('confirm-body').textContent`); !strings.Contains(body, "stops taking new items") {
		t.Fatalf("the pause dialog does not say what pause does: %q", body)
	}
	b.do("confirm the pause", chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitJS("the job shows paused", `document.querySelector('#job-status').dataset.status === 'paused' && document.querySelector('#job-status').dataset.reason === 'manual'`)
	if j := st.job(jobID); j.Status != "paused" {
		t.Fatalf("the API says the job is %s after pausing from the page", j.Status)
	}
	b.waitJS("resume is offered", `!document.getElementById('btn-resume').disabled && document.getElementById('btn-pause').disabled`)
	// The pause is in the job's audit log, with who made it.
	b.waitJS("the pause is in the operator actions", `(() => { const b = document.getElementById('audit-body');
		return b && !document.getElementById('audit-table').hidden && b.textContent.includes('/pause') && b.textContent.includes('provisioned'); })()`)

	// While paused the numbers settle: the page shows the API's counts and
	// failures exactly (what `qunfa watch` shows).
	var mismatch string
	for range 50 {
		j := st.job(jobID)
		page := evalJS[map[string]string](b, `(() => { const o = {};
			for (const k of ['pending','submitted','confirmed','failed','abandoned']) o[k] = document.getElementById('count-'+k).textContent;
			for (const tr of document.querySelectorAll('#failures-body tr')) o['f:'+tr.dataset.category] = tr.children[1].textContent;
			return o; })()`)
		mismatch = ""
		for _, k := range []string{"pending", "submitted", "confirmed", "failed", "abandoned"} {
			if digits(page[k]) != strconv.FormatInt(j.Counts[k], 10) {
				mismatch += fmt.Sprintf(" %s: page %q, API %d;", k, page[k], j.Counts[k])
			}
		}
		shown := 0
		for k, n := range j.Failures {
			if n == 0 {
				continue
			}
			shown++
			if digits(page["f:"+k]) != strconv.FormatInt(n, 10) {
				mismatch += fmt.Sprintf(" failures %s: page %q, API %d;", k, page["f:"+k], n)
			}
		}
		if len(page)-5 != shown {
			mismatch += fmt.Sprintf(" failure categories: page %v, API %v;", page, j.Failures)
		}
		if mismatch == "" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if mismatch != "" {
		t.Fatalf("the job page does not show the API's numbers:%s", mismatch)
	}
	shotPaused := screenshot(t, b.ctx, artifacts, "02-job-paused.png")

	// Resume.
	b.do("ask to resume", chromedp.Click(chromedp.CSS("#btn-resume")))
	b.waitJS("the resume dialog opens", `document.getElementById('confirm').open`)
	b.do("confirm the resume", chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitJS("the job shows running again", `document.querySelector('#job-status').dataset.status === 'running'`)
	if j := st.job(jobID); j.Status != "running" {
		t.Fatalf("the API says the job is %s after resuming from the page", j.Status)
	}

	// Filter failed items by category.
	b.waitJS("enough permanent failures for a paged export", `Number(document.querySelector('#failures-body tr[data-category=permanent] td').textContent.replace(/\D/g, '')) >= 12`)
	b.choose("#filter-status", "failed")
	b.choose("#filter-category", "permanent")
	b.waitJS("the table shows only failed, permanent items", `(() => {
		const rows = [...document.querySelectorAll('#items-body tr')];
		return rows.length > 0 && rows.every((r) => r.dataset.status === 'failed' && r.dataset.category === 'permanent');
	})()`)
	b.choose("#filter-category", "retryable")
	b.waitJS("another filter empties the table", `document.querySelectorAll('#items-body tr').length === 0 && !document.getElementById('items-empty').hidden`)
	b.choose("#filter-category", "permanent")
	b.waitJS("the permanent failures are back", `document.querySelectorAll('#items-body tr[data-category=permanent]').length > 0`)
	screenshot(t, b.ctx, artifacts, "03-job-failed-items.png")

	// Export the filtered items as CSV: all pages (5 items a page here),
	// caught as a browser download.
	dlDir := t.TempDir()
	before := st.itemSeqs(jobID, "failed", "permanent")
	progress := chromedp.Events(b.ctx, browser.DownloadProgress)
	b.do("allow downloads", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
			Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dlDir, EventsEnabled: new(true),
		})
		return err
	}))
	evalJS[int](b, `window.qunfa.exportPageSize = 5`)
	b.do("export CSV", chromedp.Click(chromedp.CSS("#btn-export")))
	var csvPath string
	dlCtx, cancelDL := context.WithTimeout(b.ctx, 20*time.Second)
	for ev, err := range progress {
		if err != nil {
			cancelDL()
			b.fail("wait for the CSV download", err)
		}
		if ev.State == browser.DownloadProgressStateCompleted {
			csvPath = filepath.Join(dlDir, ev.GUID)
			break
		}
		if ev.State == browser.DownloadProgressStateCanceled || dlCtx.Err() != nil {
			break
		}
	}
	cancelDL()
	if csvPath == "" {
		b.fail("download the CSV", fmt.Errorf("no completed download"))
	}
	after := st.itemSeqs(jobID, "failed", "permanent")
	raw, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(string(raw), "\ufeff"))).ReadAll()
	if err != nil {
		t.Fatalf("the export is not CSV: %v\n%s", err, raw)
	}
	if want := "seq,shard,account,to,ref,status,attempts,category,code,message,submitted_at,finished_at,msgid"; len(rows) == 0 || strings.Join(rows[0], ",") != want {
		t.Fatalf("CSV header %v, want %s", rows[:min(1, len(rows))], want)
	}
	got := map[int64]bool{}
	for _, r := range rows[1:] {
		seq, err := strconv.ParseInt(r[0], 10, 64)
		if err != nil || got[seq] {
			t.Fatalf("CSV row %v: bad or repeated seq", r)
		}
		got[seq] = true
		if r[2] != account || r[5] != "failed" || r[7] != "permanent" || r[8] != "81013" || !strings.HasPrefix(r[3], "ui-user-") ||
			r[10] == "" || r[11] == "" || r[12] != "" {
			t.Fatalf("CSV row %v is not a failed, permanent item of %s with code 81013, sent and finished, no msgid", r, account)
		}
	}
	if len(got) <= 5 {
		t.Fatalf("CSV has %d rows; the export should have read several pages of 5", len(got))
	}
	for seq := range before {
		if !got[seq] {
			t.Fatalf("CSV lacks item %d, failed before the export began", seq)
		}
	}
	for seq := range got {
		if !after[seq] {
			t.Fatalf("CSV has item %d, which the API does not list as failed/permanent", seq)
		}
	}
	if msg := evalJS[string](b, `document.getElementById('export-msg').textContent`); !strings.Contains(msg, fmt.Sprintf("Exported %d items", len(got))) {
		t.Fatalf("export message %q does not match the %d rows", msg, len(got))
	}
	t.Logf("CSV export: %d rows (API had %d before, %d after)", len(got), len(before), len(after))

	// Dead letters: redrive asks first, and the page reports the answer.
	b.do("ask to redrive permanent failures", chromedp.Click(chromedp.CSS("#btn-redrive-permanent")))
	b.waitJS("the redrive dialog opens", `document.getElementById('confirm').open`)
	b.do("back out", chromedp.Click(chromedp.CSS("#confirm-no")))
	b.waitJS("the dialog closes", `!document.getElementById('confirm').open`)
	b.waitJS("nothing under review shows the empty note", `!document.getElementById('review-empty').hidden`)

	// Switch to Chinese and back.
	b.choose("#lang", "zh")
	b.waitJS("the page is in Chinese", `document.documentElement.lang === 'zh-CN' && document.getElementById('nav-jobs').textContent === '任务'
		&& document.querySelector('#job-status').textContent.includes('发送中') && document.querySelector('#btn-pause').textContent === '暂停'`)
	b.waitJS("the items filter survives the switch", `document.getElementById('filter-category').value === 'permanent'`)
	shotZh := screenshot(t, b.ctx, artifacts, "04-job-zh.png")
	b.choose("#lang", "en")
	b.waitJS("the page is in English", `document.documentElement.lang === 'en' && document.getElementById('nav-jobs').textContent === 'Jobs' && document.querySelector('#btn-pause').textContent === 'Pause'`)

	// Accounts: edit the rate.
	b.do("open accounts", chromedp.Click(chromedp.CSS("#nav-accounts")))
	sel := `section[data-account="` + account + `"]`
	b.waitJS("the account is shown", `document.querySelector('`+sel+` input[name=rate_per_sec]')?.value === '8'`)
	b.do("change the rate", b.typeInto(sel+` input[name=rate_per_sec]`, "10"), chromedp.Click(chromedp.CSS(sel+` button[type=submit]`)))
	b.waitJS("the page confirms the save", `document.querySelector('`+sel+` .msg').textContent.includes('saved')`)
	var acct struct {
		RatePerSec float64 `json:"rate_per_sec"`
		Burst      float64 `json:"burst"`
	}
	st.call("GET", "/v1/accounts/"+account, nil, &acct)
	if acct.RatePerSec != 10 || acct.Burst != 4 {
		t.Fatalf("after saving, the API has rate %g burst %g, want 10 and 4", acct.RatePerSec, acct.Burst)
	}
	b.do("enter a bad reserve", b.typeInto(sel+` input[name=online_reserve_per_sec]`, "20"), chromedp.Click(chromedp.CSS(sel+` button[type=submit]`)))
	b.waitJS("the field error is shown on the field", `document.querySelector('`+sel+` input[name=online_reserve_per_sec]').getAttribute('aria-invalid') === 'true'`)
	screenshot(t, b.ctx, artifacts, "05-accounts.png")

	mu.Lock()
	defer mu.Unlock()
	if len(exceptions) > 0 {
		t.Fatalf("the page threw: %v", exceptions)
	}
	t.Logf("screenshots: %s, %s, %s, %s", shotJobs, shotPaused, shotZh, filepath.Join(artifacts, "05-accounts.png"))
}
