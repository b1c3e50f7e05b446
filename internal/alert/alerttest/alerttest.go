// Package alerttest records the alerts a component under test publishes.
package alerttest

import (
	"context"
	"sync"

	"github.com/qunfa/qunfa/internal/alert"
)

// Recorder is an alert.Publisher that keeps every event it is given; the
// zero value is ready; safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	events []alert.Event
}

var _ alert.Publisher = (*Recorder)(nil)

// Publish keeps events.
func (r *Recorder) Publish(_ context.Context, events ...alert.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, events...)
	return nil
}

// Events is every event kept, in the order published.
func (r *Recorder) Events() []alert.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]alert.Event(nil), r.events...)
}

// Of is the events kept of type t, in the order published.
func (r *Recorder) Of(t alert.Type) []alert.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []alert.Event
	for _, e := range r.events {
		if e.Type == t {
			out = append(out, e)
		}
	}
	return out
}
