package e2e

import (
	"fmt"
	"net/http"
	"net/url"
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
