package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// firstResultOnly is a provider whose answer to a call carries the result
// of its first recipient only, though every recipient was sent.
type firstResultOnly struct{ provider.Provider }

func (f firstResultOnly) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	r, err := f.Provider.Send(ctx, req)
	if len(r.Recipients) > 1 {
		r.Recipients = r.Recipients[:1]
	}
	return r, err
}

// TestRecipientWithoutAResultStaysSubmitted: when a provider's answer
// lacks the result of some recipients of a call, those items are kept
// submitted (uncertain: they may have been delivered) and never sent
// again blindly; the reconciler's look-up settles them, and every
// recipient is delivered once.
func TestRecipientWithoutAResultStaysSubmitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 2})
	p.account("a", 1000, 1000, 0, 5)
	p.sender.Provider = firstResultOnly{p.sender.Provider}
	p.sender.MsgCalls, p.reconciler.MsgCalls = p.store, p.store
	job := p.submit(submit.Request{Template: "hello", Recipients: recipients([]string{"a"}, 8)}, "missing-results")
	if res := p.step(ctx); len(res) != 1 {
		t.Fatalf("%d turns, want the job's one: %+v", len(res), res)
	}
	submitted := 0
	for _, it := range p.items(job.Job.ID) {
		if it.Status != store.ItemSubmitted {
			continue
		}
		submitted++
		if it.Error == nil || it.Error.Category != string(provider.Uncertain) {
			t.Errorf("item %d without a result: error %+v, want category uncertain", it.Seq, it.Error)
		}
	}
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c := v.Counts(); submitted == 0 || c.Submitted != int64(submitted) || c.Confirmed+c.Submitted != 8 || c.Confirmed == 0 {
		t.Fatalf("after the turn: counts %+v, %d items submitted: want the recipients without a result submitted, the others confirmed", c, submitted)
	}
	if n := len(p.deliveries()); n != 8 {
		t.Fatalf("%d recipients delivered, want all 8 once", n)
	}
	clk.Advance(31 * time.Second) // past SettleAfter
	v = p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 8 {
		t.Fatalf("%s %+v, want completed with 8 confirmed", v.Job.Status, v.Counts())
	}
	p.checkExactlyOnce(job.Job.ID)
}
