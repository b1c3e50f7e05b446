package sender_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/alert"
	"github.com/qunfa/qunfa/internal/alert/alerttest"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestOutcomesPublished: the sender publishes ItemOutcomes events holding
// exactly the items whose outcome became final, each once over the job,
// with its status, recipient, ref, message id and error; the outcomes of
// a turn's batches share events, and all of them go out before the job's
// JobFinished.
func TestOutcomesPublished(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 4, MaxAttempts: 3, BackoffBase: time.Second, BackoffCap: 2 * time.Second})
	outcomes := &alerttest.Recorder{}
	both := &alerttest.Recorder{} // outcomes and job events, in the order published
	p.sender.Outcomes = tee{outcomes, both}
	p.sender.Alerts = tee{p.sender.Alerts, both}
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

	events := outcomes.Of(alert.ItemOutcomes)
	if len(events) == 0 || len(events) >= 3 {
		t.Fatalf("%d ItemOutcomes events for 10 items in 3 batches, want fewer than one per batch", len(events))
	}
	seen := outcomesOnce(t, events, job.Job.ID, 0)
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
	if other := p.alerts.Of(alert.ItemOutcomes); len(other) != 0 {
		t.Errorf("%d ItemOutcomes events went to the alerts", len(other))
	}
	// Published before JobFinished, and timed no later (webhooks deliver
	// in time order).
	finished := false
	var lastOutcome time.Time
	for _, e := range both.Events() {
		switch {
		case e.Type == alert.JobFinished:
			finished = true
			if e.Time.Before(lastOutcome) {
				t.Errorf("JobFinished timed %v, before an ItemOutcomes event timed %v", e.Time, lastOutcome)
			}
		case e.Type == alert.ItemOutcomes && finished:
			t.Errorf("an ItemOutcomes event published after the job's JobFinished: %+v", e)
		case e.Type == alert.ItemOutcomes && e.Time.After(lastOutcome):
			lastOutcome = e.Time
		}
	}
	if !finished {
		t.Errorf("no JobFinished event")
	}
}

// TestOutcomesEventsAreBounded: a turn sending 250 recipients with long
// references in batches of 10 publishes their outcomes in a few events,
// each within one 64 KB EventBridge chunk, every item once, instead of 25
// events.
func TestOutcomesEventsAreBounded(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 10})
	outcomes := &alerttest.Recorder{}
	p.sender.Outcomes = outcomes
	p.account("a", 10000, 10000, 0, 1)
	rs := recipients([]string{"a"}, 250)
	for i := range rs {
		rs[i].Ref = fmt.Sprintf("%0200d", i)
	}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: rs}, "bounded")
	p.driveUntil(clk, final, job.Job.ID)
	events := outcomes.Of(alert.ItemOutcomes)
	seen := outcomesOnce(t, events, job.Job.ID, 64<<10)
	if len(seen) != 250 || len(events) < 2 || len(events) > 5 {
		t.Errorf("%d items' outcomes in %d events, want 250 in 2 to 5", len(seen), len(events))
	}
}

// TestOutcomesHeldAtMostFiveSeconds: a long turn at one message a second
// publishes the outcomes it holds at least every five seconds (and the
// rest when it ends), not all at its end.
func TestOutcomesHeldAtMostFiveSeconds(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 1, TurnDuration: time.Hour, MaxWait: 2 * time.Second})
	outcomes := &alerttest.Recorder{}
	p.sender.Outcomes = outcomes
	p.account("a", 1, 1, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 20)}, "held")
	p.driveUntil(clk, final, job.Job.ID)
	events := outcomes.Of(alert.ItemOutcomes)
	n := 0
	for i, e := range events {
		d := e.Detail.(alert.ItemOutcomesDetail)
		n += len(d.Items)
		first := d.Items[0].At
		if i < len(events)-1 && e.Time.Sub(first) > 6*time.Second {
			t.Errorf("event %d published %v after its first outcome, want at most 5 s (+ one send)", i, e.Time.Sub(first))
		}
	}
	if n != 20 || len(events) < 3 {
		t.Errorf("%d outcomes in %d events over 20 s of sending, want 20 in at least 3", n, len(events))
	}
}

// tee publishes to every publisher.
type tee []alert.Publisher

func (t tee) Publish(ctx context.Context, events ...alert.Event) error {
	for _, p := range t {
		if p != nil {
			if err := p.Publish(ctx, events...); err != nil {
				return err
			}
		}
	}
	return nil
}

// outcomesOnce collects the outcomes of ItemOutcomes events of job by seq,
// failing the test when an event belongs to another tenant or job, when a
// seq is published twice, or (maxBytes > 0) when an event's JSON is larger
// than maxBytes.
func outcomesOnce(t *testing.T, events []alert.Event, jobID string, maxBytes int) map[int64]alert.ItemOutcome {
	t.Helper()
	seen := map[int64]alert.ItemOutcome{}
	for _, e := range events {
		d := e.Detail.(alert.ItemOutcomesDetail)
		if e.Tenant != tenant || d.JobID != jobID || len(d.Items) == 0 {
			t.Fatalf("event %+v", e)
		}
		if maxBytes > 0 {
			body, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			if len(body) > maxBytes {
				t.Errorf("an ItemOutcomes event of %d bytes, want at most %d", len(body), maxBytes)
			}
		}
		for _, o := range d.Items {
			if _, dup := seen[o.Seq]; dup {
				t.Fatalf("seq %d published twice", o.Seq)
			}
			seen[o.Seq] = o
		}
	}
	return seen
}
