package sender_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// holdingAll holds every call until released, saying on started when
// each one starts.
type holdingAll struct {
	provider.Provider
	started chan struct{}
	release chan struct{}
}

func (h *holdingAll) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	h.started <- struct{}{}
	if !released(h.release) {
		return provider.SendResult{}, errors.New("holdingAll: the test never released the calls")
	}
	return h.Provider.Send(ctx, req)
}

// TestTurnRecordsEveryStragglerAtItsEnd: a turn whose last two batches
// each left a call running waits, at its end, for both and records both
// answers: every recipient confirmed, none left submitted, each sent once.
func TestTurnRecordsEveryStragglerAtItsEnd(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 1, StragglerWait: time.Second, MaxStragglers: 10})
	p.account("a", 1000, 1000, 0, 1)
	hp := &holdingAll{Provider: p.sender.Provider, started: make(chan struct{}, 10), release: make(chan struct{})}
	s2 := *p.sender
	s2.Provider = hp
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 2)}, "two-stragglers")
	msg := p.nextTurn(time.Hour)
	out := make(chan sender.Result, 1)
	go func() {
		res, err := s2.HandleTurn(context.Background(), msg)
		if err != nil {
			t.Errorf("turn: %v", err)
		}
		out <- res
	}()
	recv(t, hp.started, "the first call")
	// Past StragglerWait until the second batch's call starts (the first
	// batch's deadline may be set after its call started), then past the
	// second batch's: both calls are stragglers when the turn ends.
	advanceUntil(t, clk, time.Second, hp.started, "the second call")
	for range 15 {
		time.Sleep(20 * time.Millisecond)
		clk.Advance(time.Second)
	}
	close(hp.release)
	res := recv(t, out, "the turn's end")
	if res.Sent != 2 {
		t.Errorf("turn %+v, want 2 sent", res)
	}
	for _, it := range p.items(job.Job.ID) {
		if it.Status != store.ItemConfirmed {
			t.Errorf("item %s is %s, want confirmed: the turn recorded its answer", it.To, it.Status)
		}
	}
	p.checkExactlyOnce(job.Job.ID)
}

// advanceUntil advances clk by step every 20 ms (real time) until ch
// delivers, and fails the test after waitLimit.
func advanceUntil(t *testing.T, clk interface{ Advance(time.Duration) }, step time.Duration, ch <-chan struct{}, what string) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case <-ch:
			return
		case <-deadline:
			t.Fatalf("%s: nothing after %v", what, waitLimit)
		case <-time.After(20 * time.Millisecond):
			clk.Advance(step)
		}
	}
}
