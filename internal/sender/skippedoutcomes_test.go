package sender_test

import (
	"context"
	"testing"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// A recipient abandoned without a call — suppressed after the job was
// submitted — is a final item like any other: its outcome (abandoned,
// category suppressed) is published with the others', once. Before, only
// the items of provider calls had outcomes, and the watermark moved past
// the suppressed one, so no replay published it either.
func TestSuppressedRecipientsHaveOutcomes(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 3})
	outcomes := &alerttest.Recorder{}
	p.sender.Outcomes = outcomes
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 6)}, "supp-outcomes")
	if err := p.store.PutSuppressions(context.Background(), tenant, []store.Suppression{{Account: "a", To: "user-4", Reason: "unsubscribed"}}); err != nil {
		t.Fatal(err)
	}
	p.driveUntil(clk, final, job.Job.ID)
	seen := outcomesOnce(t, outcomes.Of(alert.ItemOutcomes), job.Job.ID, 0)
	items := p.items(job.Job.ID)
	if len(seen) != len(items) {
		t.Fatalf("outcomes of %d items, want every one of the %d", len(seen), len(items))
	}
	for _, it := range items {
		o, ok := seen[it.Seq]
		if !ok || o.To != it.To || o.Status != string(it.Status) {
			t.Fatalf("outcome %+v (published: %v) of item %s %s", o, ok, it.To, it.Status)
		}
		if it.To == "user-4" && (o.Status != string(store.ItemAbandoned) || o.Category != store.CategorySuppressed) {
			t.Fatalf("suppressed recipient's outcome %+v, want abandoned, category suppressed", o)
		}
	}
}
