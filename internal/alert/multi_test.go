package alert_test

import (
	"context"
	"errors"
	"testing"

	"github.com/qunfa/qunfa/internal/alert"
)

// recorder is a Publisher that records what it gets and fails with err.
type recorder struct {
	got []alert.Event
	err error
}

func (r *recorder) Publish(_ context.Context, events ...alert.Event) error {
	r.got = append(r.got, events...)
	return r.err
}

func TestMulti(t *testing.T) {
	errA, errB := errors.New("a down"), errors.New("b down")
	tests := []struct {
		name    string
		errs    []error // one recorder per entry
		events  int
		wantErr []error
	}{
		{"no publishers", nil, 2, nil},
		{"all succeed", []error{nil, nil, nil}, 2, nil},
		{"first fails, rest still get events", []error{errA, nil, nil}, 1, []error{errA}},
		{"errors joined", []error{errA, nil, errB}, 3, []error{errA, errB}},
		{"no events", []error{errA}, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m alert.Multi
			var recs []*recorder
			for _, err := range tt.errs {
				r := &recorder{err: err}
				recs = append(recs, r)
				m = append(m, r)
			}
			m = append(m, nil) // a nil publisher is skipped
			events := make([]alert.Event, tt.events)
			for i := range events {
				events[i] = alert.Event{Type: alert.JobStarted, Tenant: "t"}
			}
			err := m.Publish(t.Context(), events...)
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("error %v does not wrap %v", err, want)
				}
			}
			if len(tt.wantErr) == 0 && err != nil {
				t.Errorf("error %v, want nil", err)
			}
			for i, r := range recs {
				if len(r.got) != tt.events {
					t.Errorf("publisher %d got %d events, want %d", i, len(r.got), tt.events)
				}
			}
		})
	}
}

func TestDiscard(t *testing.T) {
	if err := alert.Discard.Publish(t.Context(), alert.Event{Type: alert.JobStarted}); err != nil {
		t.Errorf("Discard.Publish: %v", err)
	}
}
