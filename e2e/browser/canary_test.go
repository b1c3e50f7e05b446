package browser

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestDashboardCanary follows a job with a canary on its page: the canary
// card shows its size and results while it sends; when the job pauses for
// it, Approve canary takes Resume's place next to Cancel, in English and
// in 中文; approving (after the confirmation dialog) resumes the job and
// the card shows the canary approved with its results.
func TestDashboardCanary(t *testing.T) {
	chromium := chromiumPath(t)
	artifacts := artifactsDir(t)
	bin := buildQunfa(t)
	st := startStack(t, bin)

	const account = "acct-canary"
	st.call("PUT", "/v1/accounts/"+account, map[string]any{"rate_per_sec": 20, "burst": 4, "online_reserve_per_sec": 0, "max_recipients_per_call": 1,
		"breaker": map[string]any{"consecutive_failures": 0, "failure_rate": 0, "min_samples": 0, "cooldown_sec": 0}}, nil)
	var recipients []map[string]any
	for i := range 40 {
		recipients = append(recipients, map[string]any{"account": account, "to": fmt.Sprintf("canary-user-%02d", i)})
	}
	var submitted job
	st.call("POST", "/v1/jobs", map[string]any{"name": "Canary job", "template": "Hi", "recipients": recipients, "canary": map[string]any{"count": 5}}, &submitted)
	jobID := submitted.ID

	b := &tab{t: t, ctx: newBrowser(t, chromium), artifacts: artifacts}
	b.do("open the dashboard", chromedp.Navigate(st.apiURL+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.do("log in", chromedp.SendKeys(chromedp.CSS("#token"), testToken), chromedp.Click(chromedp.CSS("#login-submit")))
	b.waitJS("logged in", `document.getElementById('jobs-table') !== null`)
	b.do("open the job", chromedp.Navigate(st.apiURL+"/ui/#/jobs/"+jobID))

	b.waitJS("the job waits for its canary", `(() => { const s = document.getElementById('job-status'); return s?.dataset.status === 'paused' && s.dataset.reason === 'canary'; })()`)
	if j := st.job(jobID); j.Status != "paused" || j.PauseReason == nil || *j.PauseReason != "canary" {
		t.Fatalf("the job is %s (%v), want paused for its canary", j.Status, j.PauseReason)
	}
	b.waitJS("the card shows the canary sent", `!document.getElementById('canary').hidden && document.getElementById('canary-count').textContent === '5' &&
		Number(document.getElementById('canary-confirmed').textContent) + Number(document.getElementById('canary-failed').textContent) === 5`)
	b.waitJS("Approve canary replaces Resume, next to Cancel", `(() => {
		const a = document.getElementById('btn-approve-canary'), r = document.getElementById('btn-resume'), c = document.getElementById('btn-cancel');
		return !a.hidden && !a.disabled && r.hidden && !c.disabled && a.nextElementSibling === c && a.textContent === 'Approve canary'; })()`)
	if got := evalJS[string](b, `document.getElementById('canary-state').textContent`); !strings.Contains(got, "waits for approval") {
		t.Errorf("canary state %q", got)
	}
	shot(t, b, artifacts, "canary-waiting", "en")

	b.choose("#lang", "zh")
	b.waitJS("in 中文", `document.getElementById('btn-approve-canary')?.textContent === '确认灰度' && document.getElementById('canary-h').textContent === '灰度发送'`)
	shot(t, b, artifacts, "canary-waiting", "zh")
	b.choose("#lang", "en")
	b.waitJS("in English again", `document.getElementById('btn-approve-canary')?.textContent === 'Approve canary'`)

	// Dismissing the dialog changes nothing.
	b.do("ask to approve", chromedp.Click(chromedp.CSS("#btn-approve-canary")))
	b.waitJS("the dialog explains", `document.getElementById('confirm').open && document.getElementById('confirm').textContent.includes('5 messages')`)
	b.do("dismiss", chromedp.Click(chromedp.CSS("#confirm-no")))
	b.waitJS("the dialog closes", `!document.getElementById('confirm').open`)
	if j := st.job(jobID); j.Status != "paused" {
		t.Fatalf("dismissing approved the canary: the job is %s", j.Status)
	}

	b.do("approve", chromedp.Click(chromedp.CSS("#btn-approve-canary")))
	b.waitJS("the dialog opens", `document.getElementById('confirm').open`)
	b.do("confirm", chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.waitJS("the canary is approved", `document.getElementById('canary-state').textContent.startsWith('Approved') && document.getElementById('btn-approve-canary').hidden`)
	b.waitJS("the job sends the rest and finishes", `['completed','partial'].includes(document.getElementById('job-status').dataset.status)`)
	if j := st.job(jobID); j.Counts["confirmed"]+j.Counts["failed"] != 40 {
		t.Errorf("after approval: %+v", j)
	}
	shot(t, b, artifacts, "canary-approved", "en")
}
