package sender_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
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
	// logs is what the turn logs.
	logs *lockedBuffer
}

// startHeldTurn submits the job (name is its idempotency key), starts its
// turn and returns once the call to user-0 is held.
func startHeldTurn(t *testing.T, p *pipeline, name string) heldTurn {
	t.Helper()
	h := heldTurn{
		hp: &holdingProvider{Provider: p.sender.Provider, to: "user-0", held: make(chan struct{}), release: make(chan struct{}),
			answered: make(chan struct{}, 100)},
		out:  make(chan sender.Result, 1),
		logs: &lockedBuffer{},
	}
	s2 := *p.sender
	s2.Provider = h.hp
	s2.Log = slog.New(slog.NewTextHandler(h.logs, nil))
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

// lockedBuffer is a log destination written by a turn's goroutine and
// read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// stragglerWarning is what a turn logs when it records a batch without a
// call still running after StragglerWait.
const stragglerWarning = "slow provider calls left running"

// leftRunning advances clk a second at a time (real time between, for the
// turn's goroutine) until the turn has recorded its batch without the
// held call: the batch's deadline can be set after the call started, so
// one advance could come first and leave no straggler. It fails the test
// after waitLimit.
func (h heldTurn) leftRunning(t *testing.T, clk *clock.Fake) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !strings.Contains(h.logs.String(), stragglerWarning) {
		if time.Now().After(deadline) {
			t.Fatalf("the held call not left running after %v:\n%s", waitLimit, h.logs)
		}
		clk.Advance(time.Second)
		time.Sleep(20 * time.Millisecond)
	}
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
