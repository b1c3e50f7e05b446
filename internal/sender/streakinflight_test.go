package sender_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// claimSizeStore records the Max of the claims made while held is set.
type claimSizeStore struct {
	store.Store
	held atomic.Bool
	mu   sync.Mutex
	maxs []int
}

func (s *claimSizeStore) ClaimItems(ctx context.Context, p store.ClaimItemsParams) (store.ClaimItemsResult, error) {
	if s.held.Load() {
		s.mu.Lock()
		s.maxs = append(s.maxs, p.Max)
		s.mu.Unlock()
	}
	return s.Store.ClaimItems(ctx, p)
}

// TestStragglersCountAgainstTheBreakerStreak: an account whose breaker
// opens after 2 failed sends in a row never has more than 2 sends without
// an answer, stragglers included: while one call is still out after
// StragglerWait, each claim asks for 1 item at most, so the sends judged
// when the answers arrive can never overshoot the streak.
//
// The first batch sends 2 calls, the one to user-0 held; the other must
// have answered before the fake clock ends the batch's StragglerWait, or
// both are stragglers (2, the streak: the turn rightly waits for them).
// That is a race between the answer and the advance, so a run where both
// were left running is set up again, at most 5 times.
func TestStragglersCountAgainstTheBreakerStreak(t *testing.T) {
	t.Parallel()
	for try := 1; try <= 5; try++ {
		maxs, ok := oneStragglerOfTwo(t)
		if !ok {
			continue // both calls were stragglers: set up again
		}
		for _, m := range maxs {
			if m > 1 {
				t.Fatalf("claims while one send was unanswered asked for %v items, want at most 1 each (streak 2)", maxs)
			}
		}
		return
	}
	t.Fatal("5 tries left both calls of the first batch running: the case of one straggler was never set up")
}

// oneStragglerOfTwo runs the scenario once; ok is false when the turn did
// not go on while the held call was out.
func oneStragglerOfTwo(t *testing.T) (maxs []int, ok bool) {
	t.Helper()
	p, clk := fakePipeline(t, sender.Config{ClaimBatch: 5, StragglerWait: time.Second, MaxStragglers: 10})
	breakerAccount(p, "a", 2)
	hp := &holdingProvider{Provider: p.sender.Provider, to: "user-0", held: make(chan struct{}), release: make(chan struct{}),
		answered: make(chan struct{}, 100)}
	cs := &claimSizeStore{Store: p.store}
	s2 := *p.sender
	s2.Provider, s2.Store = hp, cs
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 5)}, "streakout")
	out := make(chan sender.Result, 1)
	msg := p.nextTurn(time.Hour)
	go func() {
		res, err := s2.HandleTurn(context.Background(), msg)
		if err != nil {
			t.Errorf("turn: %v", err)
		}
		out <- res
	}()
	recv(t, hp.held, "the held call")
	within(t, hp.answered, 1, "the first batch's other call")
	cs.held.Store(true)
	clk.Advance(time.Second) // the held call is a straggler now
	// The turn goes on without the straggler; its waits are on the fake
	// clock, moved on until the other 3 recipients' calls have answered.
	got := 0
	deadline := time.After(2 * time.Second)
wait:
	for got < 3 {
		select {
		case <-hp.answered:
			got++
		case <-deadline:
			break wait
		case <-time.After(5 * time.Millisecond):
			clk.Advance(100 * time.Millisecond)
		}
	}
	cs.held.Store(false)
	close(hp.release)
	if res := recv(t, out, "the turn"); got == 3 && res.Sent != 5 {
		t.Fatalf("turn %+v, want 5 sent", res)
	}
	cs.mu.Lock()
	maxs = cs.maxs
	cs.mu.Unlock()
	if got < 3 {
		if len(maxs) > 0 {
			t.Fatalf("the turn claimed (%v) but sent nothing while a call was out", maxs)
		}
		return nil, false
	}
	p.checkExactlyOnce(job.Job.ID)
	return maxs, true
}
