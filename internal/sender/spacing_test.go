package sender_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// answersAfter is a provider whose answers take d on the fake clock: the
// call reaches the provider (its delivery is timed) and is answered d
// later.
type answersAfter struct {
	provider.Provider
	clk *clock.Fake
	d   time.Duration
}

func (a answersAfter) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	r, err := a.Provider.Send(ctx, req)
	a.clk.Advance(a.d)
	return r, err
}

// TestSpacedAccountWaitsAfterEachAnswer: an account whose bucket holds a
// single token (a burst under 4) gets each send 1/rate after the answer to
// the one before, not only 1/rate after its token: the provider, which
// received the previous send before it answered, never sees two sends
// closer than 1/rate however slow its answers; nor is it kept waiting much
// longer than that.
func TestSpacedAccountWaitsAfterEachAnswer(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 1})
	const gap, answer = 250 * time.Millisecond, 150 * time.Millisecond
	p.account("a", 4, 2, 0, 1) // 1/rate = 250 ms; the sender's bucket holds 1
	p.sender.Provider = answersAfter{Provider: p.sender.Provider, clk: clk, d: answer}
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 12)}, "spaced")
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted || v.Counts().Confirmed != 12 {
		t.Fatalf("%s %+v", v.Job.Status, v.Counts())
	}
	p.checkExactlyOnce(job.Job.ID)
	var ts []time.Time
	for _, ds := range p.deliveries() {
		ts = append(ts, ds[0].TS)
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(ts); i++ {
		if d := ts[i].Sub(ts[i-1]); d < answer+gap {
			t.Fatalf("sends %d and %d %v apart, want at least the answer time %v plus 1/rate %v", i-1, i, d, answer, gap)
		}
	}
	// ...and not much more: the wait is for the gap, not longer.
	if span, most := ts[len(ts)-1].Sub(ts[0]), time.Duration(len(ts)-1)*2*(answer+gap); span > most {
		t.Fatalf("%d sends over %v, want at most %v (twice the answer time plus 1/rate each)", len(ts), span, most)
	}
}
