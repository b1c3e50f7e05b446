package sender_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// recipientsPerCall records how many recipients each provider call carried.
type recipientsPerCall struct {
	provider.Provider
	mu    sync.Mutex
	sizes []int
}

func (r *recipientsPerCall) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	r.mu.Lock()
	r.sizes = append(r.sizes, len(req.To))
	r.mu.Unlock()
	return r.Provider.Send(ctx, req)
}

// TestAccountChangeTakesEffectWithinAccountRefresh: a running turn reads
// its account again once AccountRefresh has passed since it was read, so
// a change made while the turn runs applies from the first batch
// AccountRefresh after that read on, not only in the next turn. The
// provider's first call raises the account's max_recipients_per_call from
// 1 to 5 and takes exactly AccountRefresh on the fake clock; every later
// call of the template without variables carries several recipients.
func TestAccountChangeTakesEffectWithinAccountRefresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// One long turn, no token waits (a full bucket of 1000): the fake
	// clock moves only in the provider's first call.
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 1, TurnDuration: time.Hour,
		AccountRefresh: time.Second, StragglerWait: time.Minute})
	p.account("a", 1000, 1000, 0, 1)
	rec := &recipientsPerCall{Provider: p.sender.Provider}
	p.sender.Provider = &onCall{Provider: rec, at: 1, hook: func() {
		p.account("a", 1000, 1000, 0, 5)
		clk.Advance(time.Second)
	}}
	job := p.submit(submit.Request{Template: "hello", Recipients: recipients([]string{"a"}, 9)}, "acct-refresh")
	res, err := p.sender.HandleTurn(ctx, p.nextTurn(time.Hour))
	if err != nil || res.Disposition != sender.Done {
		t.Fatalf("turn: %+v %v", res, err)
	}
	v, err := p.store.GetJob(ctx, job.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 9 {
		t.Fatalf("%s %+v, want 9 confirmed in one turn", v.Job.Status, v.Counts())
	}
	p.checkExactlyOnce(job.Job.ID)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.sizes) < 2 || rec.sizes[0] != 1 {
		t.Fatalf("calls carried %v recipients, want 1 in the first", rec.sizes)
	}
	for i, n := range rec.sizes[1:] {
		if n < 2 {
			t.Fatalf("calls carried %v recipients: call %d carried %d, after the account allowed 5 a call AccountRefresh before", rec.sizes, i+2, n)
		}
	}
}
