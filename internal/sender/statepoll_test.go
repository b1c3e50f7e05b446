package sender_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/control"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// pausingTokenStore pauses the job through the controller right after the
// turn's second token take (the one that finds the bucket empty).
type pausingTokenStore struct {
	store.Store
	pause func()
	mu    sync.Mutex
	takes int
}

func (s *pausingTokenStore) TakeTokens(ctx context.Context, p store.TakeTokensParams) (store.TakeTokensResult, error) {
	res, err := s.Store.TakeTokens(ctx, p)
	s.mu.Lock()
	s.takes++
	n := s.takes
	s.mu.Unlock()
	if n == 2 {
		s.pause()
	}
	return res, err
}

// TestPauseSeenByATurnWaitingForTokens: a turn waiting in its handler for
// its account's tokens re-reads the job at most every StatePoll, so a
// pause made while it waits stops it before its next claim: nothing more
// is sent for a paused job.
func TestPauseSeenByATurnWaitingForTokens(t *testing.T) {
	t.Parallel()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 1, MaxWait: 2 * time.Second, StatePoll: 100 * time.Millisecond})
	p.account("a", 2, 1, 0, 1) // one token, then one every 500 ms: waited for in the handler
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, "pollpause")
	ctl := &control.Controller{Store: p.store, Queue: p.queue, Clock: clk}
	s2 := *p.sender
	s2.Store = &pausingTokenStore{Store: p.store, pause: func() {
		if _, err := ctl.Pause(context.Background(), job.Job.ID); err != nil {
			t.Errorf("pause: %v", err)
		}
	}}
	res, err := s2.HandleTurn(context.Background(), p.nextTurn(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 1 {
		t.Fatalf("turn %+v: sent %d, want 1 (the job was paused while the turn waited for its next token)", res, res.Sent)
	}
	if n := len(p.deliveries()); n != 1 {
		t.Fatalf("%d recipients delivered, want 1", n)
	}
	if v, err := p.store.GetJob(context.Background(), job.Job.ID); err != nil || v.Job.Status != store.JobPaused {
		t.Fatalf("job %s (%v), want paused", v.Job.Status, err)
	}
}
