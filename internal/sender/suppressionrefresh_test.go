package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// TestSuppressionEntryTakesEffectWithinAccountRefresh: a running turn reads
// its tenant's suppression list's change mark again once AccountRefresh
// has passed since its last read, so an entry added while the turn runs
// keeps the recipient from being sent from the first batch AccountRefresh
// after that read on — not only in the job's next turn. The provider's
// first call adds the entry and takes exactly AccountRefresh on the fake
// clock; the next batch is the boundary instant.
func TestSuppressionEntryTakesEffectWithinAccountRefresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// One long turn, one recipient a batch, no token waits (a full
	// bucket of 1000): the fake clock moves only in the provider's call.
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 1, TurnDuration: time.Hour,
		AccountRefresh: time.Second, StragglerWait: time.Minute})
	p.account("a", 1000, 1000, 0, 1)
	counted := &suppLookups{Store: p.store}
	p.sender.Store = counted
	var hookErr error
	p.sender.Provider = &onCall{Provider: p.sender.Provider, at: 1, hook: func() {
		hookErr = p.store.PutSuppressions(ctx, tenant, []store.Suppression{{Account: "a", To: "user-1", CreatedAt: clk.Now()}})
		clk.Advance(time.Second)
	}}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "supp-refresh")
	res, err := p.sender.HandleTurn(ctx, p.nextTurn(time.Hour))
	if err != nil || res.Disposition != sender.Done {
		t.Fatalf("turn: %+v %v", res, err)
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Job.Status != store.JobPartial || v.Counts().Confirmed != 2 || v.Counts().Abandoned != 1 ||
		v.Failures()[store.CategorySuppressed] != 1 {
		t.Fatalf("%s %+v %v: want user-1 abandoned as suppressed within the turn, the other two confirmed",
			v.Job.Status, v.Counts(), v.Failures())
	}
	for _, ds := range p.deliveries() {
		if ds[0].ToID == "user-1" {
			t.Fatal("user-1 was sent after its suppression entry, AccountRefresh after the turn read the list's mark")
		}
	}
	if counted.calls.Load() == 0 {
		t.Error("no suppression look-up after the list changed during the turn")
	}
	p.checkExactlyOnce(job.Job.ID)
}

// TestSuppressedRecipientLeavesTheRestOfItsBatchSent: a suppressed
// recipient in the middle of a batch is abandoned and the batch's later
// recipients are sent in the same turn — none left submitted unsent for
// the reconciler to find. One turn, batches of 3, the second recipient of
// the second batch suppressed after submission.
func TestSuppressedRecipientLeavesTheRestOfItsBatchSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, _ := fakePipeline(t, sender.Config{ClaimBatch: 3, TurnDuration: time.Hour})
	p.account("a", 1000, 1000, 0, 1)
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 6)}, "supp-mid-batch")
	if err := p.store.PutSuppressions(ctx, tenant, []store.Suppression{{Account: "a", To: "user-4", Reason: "unsubscribed"}}); err != nil {
		t.Fatal(err)
	}
	res, err := p.sender.HandleTurn(ctx, p.nextTurn(time.Hour))
	if err != nil || res.Disposition != sender.Done {
		t.Fatalf("turn: %+v %v", res, err)
	}
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c := v.Counts(); v.Job.Status != store.JobPartial || c.Confirmed != 5 || c.Abandoned != 1 || c.Submitted != 0 {
		t.Fatalf("after one turn: %s %+v: want 5 confirmed, user-4 abandoned, nothing left submitted", v.Job.Status, c)
	}
	sent := map[string]int{}
	for _, ds := range p.deliveries() {
		sent[ds[0].ToID] += len(ds)
	}
	if sent["user-4"] != 0 || sent["user-5"] != 1 {
		t.Errorf("deliveries %v: user-4 never (suppressed), user-5 once (after it in the batch)", sent)
	}
	p.checkExactlyOnce(job.Job.ID)
}

// TestPacedBatchOfSuppressedRecipientsOnly: on a randomly paced account, a
// batch whose every recipient was suppressed after submission makes no
// call: its items are abandoned, the turn goes on to the next batch and
// the job finishes with the others sent once.
func TestPacedBatchOfSuppressedRecipientsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 3})
	p.putAccount(store.Account{ID: "a", RatePerSec: 4, Burst: 4, MaxRecipientsPerCall: 1,
		Pacing: store.Pacing{Mode: store.PacingRandom}})
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 6)}, "paced-all-suppressed")
	var entries []store.Suppression
	for _, to := range []string{"user-0", "user-1", "user-2"} {
		entries = append(entries, store.Suppression{Account: "a", To: to, Reason: "unsubscribed"})
	}
	if err := p.store.PutSuppressions(ctx, tenant, entries); err != nil {
		t.Fatal(err)
	}
	v := p.driveUntil(clk, final, job.Job.ID)
	if c := v.Counts(); v.Job.Status != store.JobPartial || c.Confirmed != 3 || c.Abandoned != 3 ||
		v.Failures()[store.CategorySuppressed] != 3 {
		t.Fatalf("%s %+v %v: want the first batch's 3 abandoned as suppressed, the other 3 confirmed", v.Job.Status, c, v.Failures())
	}
	for _, ds := range p.deliveries() {
		if to := ds[0].ToID; to == "user-0" || to == "user-1" || to == "user-2" {
			t.Fatalf("suppressed recipient %s was sent", to)
		}
	}
	p.checkExactlyOnce(job.Job.ID)
}
