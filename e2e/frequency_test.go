package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/api"
)

// TestFrequencyCap: an account capped at one message a day per recipient.
// By the mock's log: a first job delivers every recipient once; the
// preview then counts them all frequency_capped, and a second job to the
// same recipients delivers nothing more, its items abandoned with category
// frequency_capped. On a second capped account, two jobs submitted at the
// same moment deliver each recipient once in total.
func TestFrequencyCap(t *testing.T) {
	t.Parallel()
	const n = 30
	m := startMock(t)
	d := startDev(t, m, devOptions{})
	capped := map[string]any{"max": 1, "window_sec": 86400}
	for _, id := range []string{"fc-a", "fc-b"} {
		m.setAccount(id, map[string]any{"rate_per_sec": 200, "burst": 200})
		a := d.putAccount(id, map[string]any{"rate_per_sec": 200, "burst": 50, "frequency_cap": capped})
		if a.FrequencyCap == nil || a.FrequencyCap.Max != 1 || a.FrequencyCap.WindowSec != 86400 {
			t.Fatalf("account %s frequency_cap %+v", id, a.FrequencyCap)
		}
	}
	preview := func(rcs []recipient) api.JobPreview {
		t.Helper()
		var pv api.JobPreview
		d.decode(d.call("POST", "/v1/jobs/preview", authHeader(), mustJSON(t, jobRequest{Name: "p", Template: testTemplate, Recipients: rcs})),
			http.StatusOK, &pv)
		return pv
	}

	// One job after another.
	rcs := recipientsFor("fc-a", n)
	if pv := preview(rcs); pv.Total != n || pv.Dropped.FrequencyCapped != 0 {
		t.Errorf("preview before any send: %+v", pv)
	}
	j1 := d.submit("fc-1", jobRequest{Name: "first", Template: testTemplate, Recipients: rcs})
	f1 := d.waitFinal(j1.ID, 60*time.Second)
	checkCompleted(t, f1, n, len(checkExactlyOnce(t, m.deliveries(), j1.ID, rcs)))
	if pv := preview(rcs); pv.Total != 0 || pv.Dropped.FrequencyCapped != n {
		t.Errorf("preview after the first job: total %d, dropped %+v; want 0 and %d frequency_capped", pv.Total, pv.Dropped, n)
	}
	j2 := d.submit("fc-2", jobRequest{Name: "second", Template: testTemplate, Recipients: rcs, Budget: n})
	f2 := d.waitFinal(j2.ID, 60*time.Second)
	if lines := jobDeliveries(m.deliveries(), j2.ID); len(lines) != 0 {
		t.Errorf("the second job delivered %d messages to recipients at their cap", len(lines))
	}
	if f2.Counts.Abandoned != n || f2.Failures["frequency_capped"] != n || f2.BudgetUsed != 0 {
		t.Errorf("second job %s: counts %+v, failures %v, budget used %d; want all %d abandoned frequency_capped, no budget",
			f2.Status, f2.Counts, f2.Failures, f2.BudgetUsed, n)
	}

	// Two jobs at the same moment.
	rcs = recipientsFor("fc-b", n)
	j3 := d.submit("fc-3", jobRequest{Name: "third", Template: testTemplate, Recipients: rcs})
	j4 := d.submit("fc-4", jobRequest{Name: "fourth", Template: testTemplate, Recipients: rcs})
	f3, f4 := d.waitFinal(j3.ID, 60*time.Second), d.waitFinal(j4.ID, 60*time.Second)
	perTo := map[string]int{}
	for _, dl := range m.deliveries() {
		if dl.GUID == "fc-b" {
			perTo[dl.ToID]++
		}
	}
	if len(perTo) != n {
		t.Errorf("fc-b: %d recipients delivered, want %d", len(perTo), n)
	}
	for to, k := range perTo {
		if k != 1 {
			t.Errorf("fc-b/%s got %d messages, cap is 1 a day", to, k)
		}
	}
	if c3, c4 := f3.Counts, f4.Counts; c3.Confirmed+c4.Confirmed != n || c3.Abandoned+c4.Abandoned != n ||
		f3.Failures["frequency_capped"]+f4.Failures["frequency_capped"] != n {
		t.Errorf("concurrent jobs: %+v %v and %+v %v; want %d confirmed and %d frequency_capped in total", c3, f3.Failures, c4, f4.Failures, n, n)
	}
	checkNoRateLimited(t, m.stats())
}
