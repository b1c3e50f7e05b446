// Package clock is the time port: everything in qunfa that needs "now" asks a
// Clock, so rate limiting, backoff and staleness can be tested with a fake
// clock instead of wall-clock waits.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock tells the current time.
type Clock interface {
	Now() time.Time
}

// System is the real clock.
type System struct{}

// Now returns the wall-clock time.
func (System) Now() time.Time { return time.Now() }

// Sleep waits d or until ctx is done.
func (System) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// After returns a channel that receives the time once d has passed.
func (System) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Sleeper is a clock that can also wait. Short in-handler waits (never more
// than a fraction of a second) go through it, so tests with a Fake clock do
// not wait at all.
type Sleeper interface {
	Clock
	Sleep(ctx context.Context, d time.Duration) error
	// After returns a channel that receives the time once d has passed on
	// this clock (for a select between a result and a deadline).
	After(d time.Duration) <-chan time.Time
}

// Fake is a clock that moves only when told to. It is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	t       time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a fake clock showing t.
func NewFake(t time.Time) *Fake { return &Fake{t: t} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

// Advance moves the fake time forward by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.fire()
	f.mu.Unlock()
}

// After returns a channel that receives the fake time once it has moved d
// forward (at once for d <= 0).
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	f.waiters = append(f.waiters, fakeWaiter{at: f.t.Add(d), ch: ch})
	f.fire()
	return ch
}

// fire delivers to the waiters whose time has come; f.mu must be held.
func (f *Fake) fire() {
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if !f.t.Before(w.at) {
			w.ch <- f.t
			continue
		}
		kept = append(kept, w)
	}
	f.waiters = kept
}

// Sleep advances the fake time by d at once.
func (f *Fake) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d > 0 {
		f.Advance(d)
	}
	return nil
}

// Set moves the fake time to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.t = t
	f.fire()
	f.mu.Unlock()
}
