package sender_test

import (
	"context"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// heldTurn is a turn of a job of three recipients of account "a" running
// in the background against a provider that holds the call to user-0
// until released: the fixture of the straggler tests.
type heldTurn struct {
	hp    *holdingProvider
	out   chan sender.Result
	jobID string
}

// startHeldTurn submits the job (name is its idempotency key), starts its
// turn and returns once the call to user-0 is held.
func startHeldTurn(t *testing.T, p *pipeline, name string) heldTurn {
	t.Helper()
	h := heldTurn{
		hp: &holdingProvider{Provider: p.sender.Provider, to: "user-0", held: make(chan struct{}), release: make(chan struct{}),
			answered: make(chan struct{}, 100)},
		out: make(chan sender.Result, 1),
	}
	s2 := *p.sender
	s2.Provider = h.hp
	h.jobID = p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 3)}, name).Job.ID
	msg := p.nextTurn(time.Hour)
	go func() {
		res, err := s2.HandleTurn(context.Background(), msg)
		if err != nil {
			t.Errorf("turn: %v", err)
		}
		h.out <- res
	}()
	recv(t, h.hp.held, "the first call")
	return h
}

// noCallFor fails the test if another call is answered within d (real
// time: the turn's goroutine runs on its own) while the held one is out.
func (h heldTurn) noCallFor(t *testing.T, d time.Duration, why string) {
	t.Helper()
	select {
	case <-h.hp.answered:
		t.Fatal("a call went out while " + why)
	case <-time.After(d):
	}
}

// release answers the held call and wants the same turn to send all three
// recipients, each confirmed once.
func (h heldTurn) release(t *testing.T, p *pipeline) {
	t.Helper()
	close(h.hp.release)
	res := recv(t, h.out, "the turn after the straggler answered")
	if res.Sent != 3 {
		t.Fatalf("turn %+v, want 3 sent", res)
	}
	for _, it := range p.items(h.jobID) {
		if it.Status != store.ItemConfirmed {
			t.Fatalf("item %s is %s, want confirmed", it.To, it.Status)
		}
	}
	p.checkExactlyOnce(h.jobID)
}
