package sender_test

import (
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestFrequencyCapAcrossConcurrentJobs: two jobs to the same 20 recipients
// of an account capped at one message a day run at once; by the mock's
// log every recipient gets exactly one message in total, the other item
// of each recipient is abandoned with category frequency_capped, and
// capped items use none of their job's budget.
func TestFrequencyCapAcrossConcurrentJobs(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{sender: sender.Config{ClaimBatch: 5, Concurrency: 4}, shardSplit: 5})
	p.putAccount(store.Account{ID: "a", RatePerSec: 100000, Burst: 100000, MaxRecipientsPerCall: 1,
		FrequencyCap: store.FrequencyCap{Max: 1, WindowSec: 86400}})
	const n = 20
	req := submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, n), Budget: n}
	j1 := p.submit(req, "fc-1")
	j2 := p.submit(req, "fc-2")
	v1 := p.runUntilFinal(j1.Job.ID, 8, 60*time.Second)
	v2 := p.runUntilFinal(j2.Job.ID, 8, 60*time.Second)

	perTo := map[string]int{}
	for _, ds := range p.deliveries() {
		perTo[ds[0].ToID] += len(ds)
	}
	if len(perTo) != n {
		t.Errorf("mock delivered to %d recipients, want %d", len(perTo), n)
	}
	for to, k := range perTo {
		if k != 1 {
			t.Errorf("recipient %s got %d messages, cap is 1 a day", to, k)
		}
	}
	var confirmed, capped int64
	for _, v := range []store.JobView{v1, v2} {
		c := v.Counts()
		confirmed += c.Confirmed
		capped += v.Failures()[store.CategoryFrequencyCapped]
		if c.Confirmed+c.Abandoned != n || c.Abandoned != v.Failures()[store.CategoryFrequencyCapped] {
			t.Errorf("job %s: counts %+v, failures %v", v.Job.ID, c, v.Failures())
		}
		if v.Job.BudgetUsed != c.Confirmed {
			t.Errorf("job %s used %d of its budget for %d sends", v.Job.ID, v.Job.BudgetUsed, c.Confirmed)
		}
		p.checkExactlyOnce(v.Job.ID)
	}
	if confirmed != n || capped != n {
		t.Errorf("confirmed %d and capped %d across both jobs, want %d and %d", confirmed, capped, n, n)
	}
	for _, it := range append(p.items(j1.Job.ID), p.items(j2.Job.ID)...) {
		if it.Status == store.ItemAbandoned && (it.Error == nil || it.Error.Category != store.CategoryFrequencyCapped) {
			t.Errorf("item %d abandoned with %+v", it.Seq, it.Error)
		}
	}
}
