package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// Providers (DESIGN.md "Providers") through the running processes.

// TestLostAnswersWithoutLookup: a wecomapi account whose provider has no
// status look-up ("status_lookup": false). The mock delivers and logs 30 %
// of the calls but never answers them. Those items must go straight to
// review after the settle delay — never looked up, never sent again — and
// once an operator resolves them as delivered the job completes, each
// recipient exactly once. The mock itself would answer look-ups here: only
// the account's setting keeps qunfa from asking.
func TestLostAnswersWithoutLookup(t *testing.T) {
	t.Parallel()
	const acct = "nolookup-a"
	m := startMock(t)
	d := startDev(t, m, devOptions{ProviderTimeout: 500 * time.Millisecond, ReconcileEvery: time.Second})
	if a := d.putAccount(acct, map[string]any{"rate_per_sec": 500, "status_lookup": false}); a.StatusLookup || a.Provider != "wecomapi" {
		t.Fatalf("account = provider %q, status_lookup %v; want wecomapi without a look-up", a.Provider, a.StatusLookup)
	}
	m.setAccount(acct, map[string]any{"timeout_ratio": 0.3})
	rcs := recipientsFor(acct, 60)
	job := d.submit("nolookup", jobRequest{Name: "lost answers, no look-up", Template: testTemplate, Recipients: rcs})
	sane := countsChecker(t)

	// Everything answered is confirmed; the unanswered wait for review.
	reviewQuery := url.Values{"status": {"submitted"}}
	var review []api.Item
	j, ok := d.waitJob(job.ID, 60*time.Second, func(j api.Job) bool {
		sane(j, "while answers are lost")
		if j.Status != "running" {
			return true // fails below: it cannot finish while items wait
		}
		if j.Counts.Pending != 0 || j.Counts.Submitted == 0 {
			return false
		}
		review = review[:0]
		for _, it := range d.items(job.ID, reviewQuery) {
			if it.UnderReview {
				review = append(review, it)
			}
		}
		return int64(len(review)) == j.Counts.Submitted
	})
	stats := m.stats()[acct]
	if !ok || j.Status != "running" {
		t.Fatalf("the unanswered items never all reached review: job %s counts %+v, %d under review; mock %+v", j.Status, j.Counts, len(review), stats)
	}
	if stats.Timeouts == 0 || int64(len(review)) != stats.Timeouts {
		t.Fatalf("%d items under review, the mock withheld %d answers: want one each (and some)", len(review), stats.Timeouts)
	}
	for _, it := range review {
		if it.Error == nil || it.Error.Category != "uncertain" {
			t.Errorf("item %d under review has error %+v, want category uncertain", it.Seq, it.Error)
		}
	}

	// Nothing is sent again while they wait, and nobody asked the mock.
	time.Sleep(3 * time.Second)
	if after := m.stats()[acct]; after.Calls != int64(len(rcs)) || after.Accepted != int64(len(rcs)) {
		t.Fatalf("mock: %d calls, %d accepted for %d recipients: an item under review was sent again", after.Calls, after.Accepted, len(rcs))
	}
	if after := m.stats()[acct]; after.StatusCalls != 0 {
		t.Errorf("qunfa made %d status look-ups on an account without one", after.StatusCalls)
	}
	if j := d.job(job.ID); j.Status != "running" || j.Counts.Submitted != int64(len(review)) {
		t.Fatalf("job while items wait for review: %s %+v", j.Status, j.Counts)
	}

	// The operator settles them: the provider's log says they arrived.
	for _, it := range review {
		r := d.call("POST", fmt.Sprintf("/v1/jobs/%s/items/%d/resolve", job.ID, it.Seq), nil, mustJSON(t, map[string]string{"outcome": "delivered"}))
		if r.Status != http.StatusOK {
			t.Fatalf("resolve item %d: %d %s", it.Seq, r.Status, r.Body)
		}
	}
	final := d.waitFinal(job.ID, 30*time.Second)
	lines := checkExactlyOnce(t, m.deliveries(), job.ID, rcs)
	checkCompleted(t, final, len(rcs), len(lines))
}

// TestJobOverThreeProviders: one job over three accounts on three
// providers — wecomapi, wecom-app (calls packed up to its own limit,
// access token from gettoken) and a generic http SMS gateway — completes
// with every recipient delivered exactly once, judged by the mock's log
// (which speaks all three APIs). The wecom-app API takes no message key,
// so its lines are matched by account and recipient.
func TestJobOverThreeProviders(t *testing.T) {
	t.Parallel()
	m := startMock(t, "--protocol", "all")
	d := startDev(t, m, devOptions{Extra: []string{"--allow-private-urls"}})
	const (
		onAPI  = "tri-api"
		onApp  = "wwtri:1000002"
		onSMS  = "tri-sms"
		n      = 40
		letter = "Your parcel has arrived."
	)
	// The application's secret, as an operator stores it for qunfa dev.
	secretDir := filepath.Join(d.dataDir, "provider-credentials", "wecom-app")
	if err := os.MkdirAll(secretDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secretDir, "default"), []byte("app-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.putAccount(onAPI, map[string]any{"rate_per_sec": 200})
	if a := d.putAccount(onApp, map[string]any{"rate_per_sec": 200, "provider": "wecom-app", "max_recipients_per_call": 10}); a.Provider != "wecom-app" {
		t.Fatalf("wecom-app account: %+v", a)
	}
	d.putAccount(onSMS, map[string]any{"rate_per_sec": 200, "provider": "http", "http": map[string]any{
		"url":      m.URL + "/sms/send",
		"headers":  map[string]string{"Content-Type": "application/json"},
		"body":     `{"account": "{{account}}", "to": "{{to}}", "content": "{{content}}", "key": "{{key}}"}`,
		"accepted": []int{200}, "throttled": []int{429}, "permanent": []int{400}, "msgid_field": "id",
	}})
	var rcs []recipient
	for _, acct := range []string{onAPI, onApp, onSMS} {
		for i := range n {
			rcs = append(rcs, recipient{Account: acct, To: fmt.Sprintf("%s-u%03d", strings.ReplaceAll(acct, ":", "-"), i)})
		}
	}
	job := d.submit("three-providers", jobRequest{Name: "three providers", Template: letter, Recipients: rcs})
	final := d.waitFinal(job.ID, 60*time.Second)
	if final.Status != "completed" || final.Counts.Confirmed != int64(len(rcs)) {
		t.Fatalf("job %s: %s, counts %+v, failures %v", job.ID, final.Status, final.Counts, final.Failures)
	}

	got := map[deliveryKey]int{}
	for _, dl := range m.deliveries() {
		got[deliveryKey{dl.GUID, dl.ToID}]++
		if dl.Content != letter {
			t.Errorf("delivery to %s/%s has content %q", dl.GUID, dl.ToID, dl.Content)
		}
		if dl.GUID != onApp && !strings.HasPrefix(dl.Key, job.ID+":") {
			t.Errorf("delivery to %s/%s has key %q, not one of the job's", dl.GUID, dl.ToID, dl.Key)
		}
	}
	for _, r := range rcs {
		if c := got[deliveryKey{r.Account, r.To}]; c != 1 {
			t.Errorf("%s/%s delivered %d times, want exactly once", r.Account, r.To, c)
		}
	}
	if len(got) != len(rcs) {
		t.Errorf("the log names %d recipients, the job %d", len(got), len(rcs))
	}
	stats := m.stats()
	for acct, maxCalls := range map[string]int64{onAPI: n, onApp: n / 10 * 2, onSMS: n} {
		st := stats[acct]
		if st.Accepted != n || st.Calls > maxCalls || st.Calls == 0 {
			t.Errorf("mock %s: %d calls, %d delivered; want %d delivered in at most %d calls", acct, st.Calls, st.Accepted, n, maxCalls)
		}
	}
}
