package storetest

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/store"
)

// testTakeSlots: an account's random schedule, stored, behaves exactly as
// store.TakeSlots on a state kept in memory — through grants, refusals,
// late takers, rate changes and a warm-up — so every field of the state
// survives the round trip; it is kept apart from the token bucket of the
// same name; bad parameters are refused.
func testTakeSlots(t *testing.T, s store.Store, _ Capabilities) {
	ctx := ctxOf(t)
	for _, p := range []store.TakeSlotsParams{
		{Bucket: "", Want: 1, RatePerSec: 1, Now: Epoch},
		{Bucket: "b", Want: -1, RatePerSec: 1, Now: Epoch},
		{Bucket: "b", Want: 1, RatePerSec: -1, Now: Epoch},
		{Bucket: "b", Want: 1, RatePerSec: 1, MinGap: -time.Second, Now: Epoch},
		{Bucket: "b", Want: 1, RatePerSec: 1, WarmupSec: -1, Now: Epoch},
	} {
		if _, err := s.TakeSlots(ctx, p); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("TakeSlots(%+v) = %v, want ErrInvalidArgument", p, err)
		}
	}

	// A fresh schedule grants its first slot at once.
	res, err := s.TakeSlots(ctx, store.TakeSlotsParams{Bucket: "acct:x", Want: 3, RatePerSec: 10, Now: Epoch, Rand: func() float64 { return 0.5 }})
	if err != nil || len(res.Slots) != 1 || !res.Slots[0].Equal(Epoch) || res.RetryAfter <= 0 {
		t.Fatalf("first take = %+v, %v; want one slot at the take and a retry time", res, err)
	}
	// The token bucket of the same name is untouched (a fresh bucket is full).
	if tk := take(t, s, "acct:x", 5, 1, 5, Epoch); tk.Granted != 5 {
		t.Fatalf("token bucket of the same name granted %d of 5", tk.Granted)
	}

	// Replay a varied sequence against the pure function.
	rng := rand.New(rand.NewPCG(7, 20))
	var (
		mem   store.PaceState
		fresh = true
		now   = Epoch
	)
	for i := range 60 {
		p := store.TakeSlotsParams{
			Bucket: "acct:replay", Want: 1 + i%3, RatePerSec: 10, MinGap: 30 * time.Millisecond,
			Now: now, Horizon: time.Duration(i%4) * 50 * time.Millisecond,
		}
		switch {
		case i >= 40:
			p.RatePerSec, p.WarmupSec = 4, 5 // warming after the idle spell below
		case i >= 20:
			p.RatePerSec = 25
		}
		u := rng.Float64()
		p.Rand = func() float64 { return u }
		want, next := store.TakeSlots(mem, fresh, p)
		got, err := s.TakeSlots(ctx, p)
		if err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		if len(got.Slots) != len(want.Slots) || got.RetryAfter != want.RetryAfter {
			t.Fatalf("take %d at +%v: store %d slots, retry %v; want %d, %v", i, now.Sub(Epoch), len(got.Slots), got.RetryAfter, len(want.Slots), want.RetryAfter)
		}
		for j := range got.Slots {
			if !got.Slots[j].Equal(want.Slots[j]) {
				t.Fatalf("take %d slot %d at +%v, want +%v", i, j, got.Slots[j].Sub(Epoch), want.Slots[j].Sub(Epoch))
			}
		}
		if len(want.Slots) > 0 {
			mem, fresh = next, false
		}
		// Takers come early, on time and late, and once after a long idle spell.
		switch {
		case i == 39:
			now = now.Add(time.Minute)
		case len(want.Slots) == 0:
			now = now.Add(want.RetryAfter + time.Duration(i%3)*7*time.Millisecond)
		default:
			now = want.Slots[len(want.Slots)-1].Add(time.Duration(i%5) * 10 * time.Millisecond)
		}
	}
}

// testTakeSlotsConcurrent: many takers of one schedule at once are each
// granted distinct slots, and together they see one schedule: no two
// slots closer than the min gap, no three within 1/rate.
func testTakeSlotsConcurrent(t *testing.T, s store.Store, caps Capabilities) {
	sz := caps.sizes()
	const rate, minGap = 20.0, 10 * time.Millisecond
	var (
		mu    sync.Mutex
		slots []time.Time
		wg    sync.WaitGroup
		errs  = make([]error, sz.workers)
	)
	for step := range sz.tokenSteps * 4 {
		now := Epoch.Add(time.Duration(step) * 100 * time.Millisecond)
		for g := range sz.workers {
			rng := rand.New(rand.NewPCG(uint64(step), uint64(g)))
			wg.Go(func() {
				res, err := s.TakeSlots(ctxOf(t), store.TakeSlotsParams{
					Bucket: "shared", Want: 2, RatePerSec: rate, MinGap: minGap, Now: now,
					Horizon: 100 * time.Millisecond, Rand: rng.Float64,
				})
				if err != nil {
					errs[g] = err
					return
				}
				mu.Lock()
				slots = append(slots, res.Slots...)
				mu.Unlock()
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("step %d: TakeSlots: %v", step, err)
			}
		}
	}
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	if len(slots) < 2 {
		t.Fatalf("%d slots granted", len(slots))
	}
	for i := 1; i < len(slots); i++ {
		if g := slots[i].Sub(slots[i-1]); g < minGap {
			t.Fatalf("slots %d and %d granted %v apart (min gap %v): two takers got overlapping schedules", i-1, i, g, minGap)
		}
		if i >= 2 {
			if d := slots[i].Sub(slots[i-2]); d < time.Duration(float64(time.Second)/rate) {
				t.Fatalf("slots %d..%d within %v at %v/s", i-2, i, d, rate)
			}
		}
	}
}
