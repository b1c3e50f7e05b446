package sender

import (
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/store"
)

// dispatchStarts runs dispatchAtSlots for n calls of an account paced at
// 10/s with minGapMs, on a fake clock, and returns when each call started.
// The slots are slotGap apart from now, or all come already (0: as when a
// turn's sleep brings several at once); the test moves the clock to the
// later ones. answer, when set, is each call's answer time: the call is
// answered that long after it started; else calls stay in flight (not
// overdue).
func dispatchStarts(t *testing.T, n, minGapMs int, answer, slotGap time.Duration) []time.Time {
	t.Helper()
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	long := &pendingCall{started: make(chan struct{}), done: make(chan struct{}), startedAt: t0.Add(-time.Hour), answeredAt: t0.Add(-time.Hour)}
	close(long.started)
	close(long.done)
	tr := &turn{s: &Sender{Clock: clk}, cfg: Config{StragglerWait: time.Second},
		account:    store.Account{RatePerSec: 10, Pacing: store.Pacing{Mode: store.PacingRandom, MinGapMs: minGapMs}},
		lastCalls:  [2]*pendingCall{long, long},
		answerTime: time.Hour, // in flight is never overdue here
	}
	calls := make([]*pendingCall, n)
	slots := make([]time.Time, n)
	for i := range calls {
		calls[i] = &pendingCall{started: make(chan struct{}), done: make(chan struct{})}
		slots[i] = t0.Add(time.Duration(i) * slotGap)
	}
	starts := make([]time.Time, n)
	tr.dispatchAtSlots(calls, slots, func(i int, pc *pendingCall) {
		pc.startedAt = clk.Now()
		starts[i] = pc.startedAt
		close(pc.started)
		if answer > 0 {
			pc.answeredAt = pc.startedAt.Add(answer)
			close(pc.done)
		}
	})
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-tr.dispatching:
			return starts
		case <-deadline:
			t.Fatal("the dispatcher did not start every call in 10 s")
		case <-time.After(time.Millisecond):
			if slotGap > 0 {
				clk.Advance(10 * time.Millisecond)
			}
		}
	}
}

// TestDispatcherKeepsTheGapsWhenSlotsComeTogether: a call never starts
// before its slot; calls whose slots have all come start no closer than the schedule's floor (the min gap plus a
// jitter allowance: 30 + 20 ms), never three within the pair span (1/rate
// plus two allowances: 140 ms) — from the starts before, while those calls
// are in flight; and, once answered, no sooner than the min gap after the
// answer before and 1/rate after the answer two before: the provider never
// sees two sends closer than the min gap nor three within 1/rate.
func TestDispatcherKeepsTheGapsWhenSlotsComeTogether(t *testing.T) {
	t.Parallel()
	gaps := func(starts []time.Time, k int) []time.Duration {
		var out []time.Duration
		for i := k; i < len(starts); i++ {
			out = append(out, starts[i].Sub(starts[i-k]))
		}
		return out
	}
	atLeast := func(t *testing.T, what string, ds []time.Duration, min time.Duration) {
		t.Helper()
		for _, d := range ds {
			if d < min {
				t.Fatalf("%s %v, want at least %v (all: %v)", what, d, min, ds)
			}
		}
	}
	t.Run("in flight", func(t *testing.T) {
		starts := dispatchStarts(t, 5, 30, 0, 0)
		atLeast(t, "gap between starts", gaps(starts, 1), 50*time.Millisecond)
		atLeast(t, "span of three starts", gaps(starts, 2), 140*time.Millisecond)
	})
	t.Run("answered in 50 ms, min gap 30 ms", func(t *testing.T) {
		starts := dispatchStarts(t, 5, 30, 50*time.Millisecond, 0)
		atLeast(t, "gap between starts", gaps(starts, 1), 80*time.Millisecond) // answer + min gap
	})
	t.Run("answered in 50 ms, no min gap", func(t *testing.T) {
		starts := dispatchStarts(t, 5, 0, 50*time.Millisecond, 0)
		atLeast(t, "span of three starts", gaps(starts, 2), 150*time.Millisecond) // answer two before + 1/rate
	})
	t.Run("slots ahead", func(t *testing.T) {
		starts := dispatchStarts(t, 4, 30, 0, 300*time.Millisecond)
		for i, at := range starts {
			if slot := time.Duration(i) * 300 * time.Millisecond; at.Sub(starts[0]) < slot {
				t.Fatalf("call %d started %v after the first, before its slot %v later", i, at.Sub(starts[0]), slot)
			}
		}
	})
}

// TestAnsweredWaitsOnlyForAnOverdueAnswer: the dispatcher waits for the
// previous call's answer only when it is overdue (three times the usual
// answer time, plus 5 ms, since the call started); and the usual answer
// time follows a faster answer at once (halfway) and a slower one slowly
// (a sixteenth of the way), so a stall does not raise it.
func TestAnsweredWaitsOnlyForAnOverdueAnswer(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	tr := &turn{s: &Sender{Clock: clk}, answerTime: 100 * time.Millisecond}
	inFlight := func(started time.Duration) *pendingCall {
		return &pendingCall{started: make(chan struct{}), done: make(chan struct{}), startedAt: clk.Now().Add(-started)}
	}
	// Not overdue (305 ms since it started is the limit): not waited for.
	notDue := make(chan bool, 1)
	go func() { notDue <- tr.answered(inFlight(305*time.Millisecond), time.Hour) }()
	select {
	case v := <-notDue:
		if v {
			t.Fatal("a call in flight 305 ms, not overdue, reported answered")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("answered() waited for a call in flight 305 ms, not overdue")
	}
	// Overdue: waited for until it answers.
	pc := inFlight(306 * time.Millisecond)
	got := make(chan bool, 1)
	go func() { got <- tr.answered(pc, time.Hour) }()
	select {
	case v := <-got:
		t.Fatalf("answered() = %v without waiting for an overdue call", v)
	case <-time.After(50 * time.Millisecond):
	}
	pc.answeredAt = pc.startedAt.Add(20 * time.Millisecond)
	close(pc.done)
	select {
	case v := <-got:
		if !v {
			t.Fatal("an overdue call that answered reported unanswered")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("answered() still waiting 10 s after the call answered")
	}
	if tr.answerTime != 60*time.Millisecond {
		t.Fatalf("usual answer time %v after a 20 ms answer from 100 ms, want 60 ms (halfway)", tr.answerTime)
	}
	slow := inFlight(0)
	slow.answeredAt = slow.startedAt.Add(900 * time.Millisecond)
	close(slow.done)
	if !tr.answered(slow, time.Second) || tr.answerTime != 112500*time.Microsecond {
		t.Fatalf("usual answer time %v after a 900 ms answer from 60 ms, want 112.5 ms (a sixteenth of the way)", tr.answerTime)
	}
}
