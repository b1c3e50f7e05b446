package sender_test

import (
	"context"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/clock"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/sender"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/submit"
)

// slotRecorder records the slots the store grants.
type slotRecorder struct {
	store.Store
	mu    sync.Mutex
	slots []time.Time
}

func (s *slotRecorder) TakeSlots(ctx context.Context, p store.TakeSlotsParams) (store.TakeSlotsResult, error) {
	res, err := s.Store.TakeSlots(ctx, p)
	s.mu.Lock()
	s.slots = append(s.slots, res.Slots...)
	s.mu.Unlock()
	return res, err
}

// callRecorder records when each provider call starts and how many
// recipients it carries.
type callRecorder struct {
	provider.Provider
	clk        clock.Clock
	mu         sync.Mutex
	at         []time.Time
	recipients []int
}

func (c *callRecorder) Send(ctx context.Context, req provider.SendRequest) (provider.SendResult, error) {
	c.mu.Lock()
	c.at = append(c.at, c.clk.Now())
	c.recipients = append(c.recipients, len(req.To))
	c.mu.Unlock()
	return c.Provider.Send(ctx, req)
}

// sleepRecorder records the longest in-handler sleep.
type sleepRecorder struct {
	*clock.Fake
	mu      sync.Mutex
	longest time.Duration
}

func (s *sleepRecorder) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.longest = max(s.longest, d)
	s.mu.Unlock()
	return s.Fake.Sleep(ctx, d)
}

// pacedPipeline is the engine on a fake clock with the store's slots, the
// provider's calls and the handler's sleeps recorded.
func pacedPipeline(t *testing.T, cfg sender.Config, shardSplit int) (*pipeline, *clock.Fake, *slotRecorder, *callRecorder, *sleepRecorder) {
	t.Helper()
	clk := clock.NewFake(t0)
	p := newPipeline(t, pipelineOptions{clock: clk, sender: cfg, responseTimeout: 200 * time.Millisecond, shardSplit: shardSplit})
	slots := &slotRecorder{Store: p.sender.Store}
	calls := &callRecorder{Provider: p.sender.Provider, clk: clk}
	sleeps := &sleepRecorder{Fake: clk}
	p.sender.Store, p.sender.Provider, p.sender.Clock = slots, calls, sleeps
	return p, clk, slots, calls, sleeps
}

func sorted(ts []time.Time) []time.Time {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	return ts
}

// TestRandomPacingSharesOneScheduleAcrossShards: an account paced at
// random (10/s, min_gap_ms 30) whose job has three shards sends every
// item once, one call per slot of the account's one schedule — never
// before its slot, the slots of all shards together no closer than the
// min gap plus the jitter allowance and never three within 1/rate — and
// no handler sleeps through a gap (every wait is at most MaxWait).
func TestRandomPacingSharesOneScheduleAcrossShards(t *testing.T) {
	t.Parallel()
	const maxWait = 300 * time.Millisecond
	p, clk, slots, calls, sleeps := pacedPipeline(t, sender.Config{ClaimBatch: 10, MaxWait: maxWait}, 20)
	p.putAccount(store.Account{ID: "a", RatePerSec: 12, OnlineReservePerSec: 2, Burst: 10, MaxRecipientsPerCall: 1,
		Pacing: store.Pacing{Mode: store.PacingRandom, MinGapMs: 30}})
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 60)}, "paced")
	if len(job.Shards) != 3 {
		t.Fatalf("%d shards, want 3", len(job.Shards))
	}
	start := clk.Now()
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted {
		t.Fatalf("status %s counts %+v", v.Job.Status, v.Counts())
	}
	p.checkExactlyOnce(job.Job.ID)

	granted, made := sorted(slots.slots), sorted(calls.at)
	if len(made) != 60 || len(granted) < len(made) {
		t.Fatalf("%d calls for 60 items on %d slots", len(made), len(granted))
	}
	for i, at := range made {
		if at.Before(granted[i]) {
			t.Fatalf("call %d at +%v, before the %d-th slot +%v", i, at.Sub(start), i, granted[i].Sub(start))
		}
	}
	// The calls as the provider sees them start: the dispatcher keeps them
	// the min gap apart and never three within 1/rate, also where the
	// turn's sleep brings several slots at once.
	for i := 1; i < len(made); i++ {
		if g := made[i].Sub(made[i-1]); g < 30*time.Millisecond {
			t.Fatalf("calls %d and %d %v apart, want ≥ the min gap 30 ms", i-1, i, g)
		}
		if i >= 2 {
			if d := made[i].Sub(made[i-2]); d < 100*time.Millisecond {
				t.Fatalf("calls %d..%d within %v, want ≥ 1/rate 100 ms", i-2, i, d)
			}
		}
	}
	for i := 1; i < len(granted); i++ {
		if g := granted[i].Sub(granted[i-1]); g < 50*time.Millisecond {
			t.Fatalf("slots %d and %d %v apart, want ≥ 30 ms + 20 ms allowance", i-1, i, g)
		}
		if i >= 2 {
			if d := granted[i].Sub(granted[i-2]); d < 140*time.Millisecond {
				t.Fatalf("slots %d..%d within %v, want ≥ 100 ms + 2 × 20 ms", i-2, i, d)
			}
		}
	}
	// 60 sends at 10/s take about 6 s of slots. (On the fake clock every
	// in-handler wait moves time at once, for the calls waiting for their
	// slots too, so some slots come late; the real-time rate is judged by
	// the e2e tests.)
	if span := granted[len(granted)-1].Sub(granted[0]); span < 4*time.Second || span > 12*time.Second {
		t.Errorf("slots span %v for %d sends at 10/s", span, len(granted))
	}
	if sleeps.longest > maxWait {
		t.Errorf("a handler slept %v, over MaxWait %v", sleeps.longest, maxWait)
	}
}

// TestRandomPacingCountsACallAsOneSend: with a template without variables
// and 5 recipients per call, each call (one slot) carries several
// recipients.
func TestRandomPacingCountsACallAsOneSend(t *testing.T) {
	t.Parallel()
	p, clk, slots, calls, _ := pacedPipeline(t, sender.Config{ClaimBatch: 10}, 0)
	p.putAccount(store.Account{ID: "a", RatePerSec: 4, Burst: 4, MaxRecipientsPerCall: 5,
		Pacing: store.Pacing{Mode: store.PacingRandom}})
	job := p.submit(submit.Request{Template: "hello all", Recipients: recipients([]string{"a"}, 50)}, "paced-multi")
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted {
		t.Fatalf("status %s counts %+v", v.Job.Status, v.Counts())
	}
	p.checkExactlyOnce(job.Job.ID)
	// Calls carry the batch size, 80% of the limit (4), a remainder
	// riding along up to the limit (5).
	total := 0
	for _, n := range calls.recipients {
		total += n
	}
	if total != 50 || len(calls.recipients) > 13 || slices.ContainsFunc(calls.recipients, func(n int) bool { return n > 5 }) {
		t.Fatalf("calls carried %v recipients, want 50 in calls of at most 5", calls.recipients)
	}
	if n := len(calls.recipients); len(slots.slots) < n || len(slots.slots) > n+2 {
		t.Fatalf("%d slots taken for %d calls", len(slots.slots), n)
	}
}

// TestRandomPacingUnderAJobRateCap: a job capped below the account's
// rate sends at the job's rate, and its held tokens waste none of the
// account's slots.
func TestRandomPacingUnderAJobRateCap(t *testing.T) {
	t.Parallel()
	p, clk, slots, calls, _ := pacedPipeline(t, sender.Config{ClaimBatch: 10}, 0)
	// A schedule drawn the same every run: the span below is judged
	// within half a second.
	p.sender.Rand = mrand.New(mrand.NewPCG(4, 40)).Float64
	p.putAccount(store.Account{ID: "a", RatePerSec: 20, Burst: 20, MaxRecipientsPerCall: 1,
		Pacing: store.Pacing{Mode: store.PacingRandom, MinGapMs: 10}})
	job := p.submit(submit.Request{Template: "hi {{n}}", Recipients: recipients([]string{"a"}, 40), RatePerSec: 4}, "paced-capped")
	v := p.driveUntil(clk, final, job.Job.ID)
	if v.Job.Status != store.JobCompleted {
		t.Fatalf("status %s counts %+v", v.Job.Status, v.Counts())
	}
	made, granted := sorted(calls.at), sorted(slots.slots)
	// 40 at 4/s (the job bucket holds 2): at least 9.5 s.
	if span := granted[len(granted)-1].Sub(granted[0]); span < 9*time.Second {
		t.Fatalf("40 slots in %v under a 4/s job cap", span)
	}
	// (One slot may go unused where a turn ends: a claim that finds the
	// last items already taken.)
	if len(granted) > len(made)+1 {
		t.Fatalf("%d slots taken for %d calls: the job cap wasted the account's slots", len(slots.slots), len(made))
	}
}

// TestRandomPacingGivesAPersonalisedCallItsOwnSlot: on an account taking 5
// recipients a call, a message with variables goes one recipient a call
// (each recipient's text differs), and each of those calls takes a slot
// of its own: never more calls than slots, none before its slot, and no
// slot taken for items that are not there.
func TestRandomPacingGivesAPersonalisedCallItsOwnSlot(t *testing.T) {
	t.Parallel()
	p, clk, slots, calls, _ := pacedPipeline(t, sender.Config{ClaimBatch: 8}, 0)
	p.putAccount(store.Account{ID: "a", RatePerSec: 40, Burst: 40, MaxRecipientsPerCall: 5,
		Pacing: store.Pacing{Mode: store.PacingRandom}})
	job := p.submit(submit.Request{Template: "hello {{n}}", Recipients: recipients([]string{"a"}, 20)}, "paced-personal")
	if v := p.driveUntil(clk, final, job.Job.ID); v.Job.Status != store.JobCompleted {
		t.Fatalf("status %s counts %+v", v.Job.Status, v.Counts())
	}
	p.checkExactlyOnce(job.Job.ID)
	granted, made := sorted(slots.slots), sorted(calls.at)
	if len(made) != 20 || len(granted) < len(made) || slices.ContainsFunc(calls.recipients, func(n int) bool { return n != 1 }) {
		t.Fatalf("%d calls carrying %v recipients on %d slots, want 20 calls of one recipient, each on a slot", len(made), calls.recipients, len(granted))
	}
	// Slots are taken for the calls a batch makes, no more: the account's
	// other senders get the rest.
	if len(granted) > len(made)+2 {
		t.Fatalf("%d slots taken for %d calls: slots wasted", len(granted), len(made))
	}
	for i, at := range made {
		if at.Before(granted[i]) {
			t.Fatalf("call %d at %v, before the %d-th slot %v", i, at, i, granted[i])
		}
	}
}
