package sender_test

import (
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestOutcomesPublishedOncePerBatch: the sender publishes one ItemOutcomes
// event per recorded batch, holding exactly the items whose outcome became
// final, each once over the job, with its status, recipient, ref, message
// id and error.
func TestOutcomesPublishedOncePerBatch(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4, MaxAttempts: 3, BackoffBase: time.Second, BackoffCap: 2 * time.Second})
	outcomes := &alertRecorder{}
	p.sender.Outcomes = outcomes
	p.account("a", 1000, 1000, 0, 1)
	if err := p.mock.SetBehaviour("a", mockprovider.Behaviour{InvalidToIDs: []string{"user-2", "user-7"}}); err != nil {
		t.Fatal(err)
	}
	rs := recipients([]string{"a"}, 10)
	for i := range rs {
		rs[i].Ref = "order-" + rs[i].To
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: rs}, "outcomes")
	p.driveUntil(clk, final, job.Job.ID)

	events := outcomes.of(alert.ItemOutcomes)
	if len(events) < 3 || len(events) > 10 {
		t.Fatalf("%d ItemOutcomes events for 10 items in batches of 4, want one per batch", len(events))
	}
	seen := map[int64]alert.ItemOutcome{}
	for _, e := range events {
		d := e.Detail.(alert.ItemOutcomesDetail)
		if e.Tenant != tenant || d.JobID != job.Job.ID || len(d.Items) == 0 || len(d.Items) > 4 {
			t.Fatalf("event %+v", e)
		}
		for _, o := range d.Items {
			if _, dup := seen[o.Seq]; dup {
				t.Fatalf("seq %d reported twice", o.Seq)
			}
			seen[o.Seq] = o
		}
	}
	if len(seen) != 10 {
		t.Fatalf("outcomes of %d items, want 10", len(seen))
	}
	for _, it := range p.items(job.Job.ID) {
		o := seen[it.Seq]
		if o.To != it.To || o.Account != "a" || o.Ref != "order-"+it.To || o.Status != string(it.Status) || o.MsgID != it.MsgID || o.At.IsZero() {
			t.Errorf("outcome %+v of item %+v", o, it)
		}
		if it.Status == store.ItemFailed && (o.Category != store.CategoryPermanent || o.Code == "") {
			t.Errorf("failed item's outcome %+v lacks its category and code", o)
		}
		if (it.Status == store.ItemConfirmed) != (o.MsgID != "") {
			t.Errorf("outcome %+v of a %s item: a message id belongs to confirmed items only", o, it.Status)
		}
	}
	if other := p.alerts.of(alert.ItemOutcomes); len(other) != 0 {
		t.Errorf("%d ItemOutcomes events went to the alerts", len(other))
	}
}
