package alert

import (
	"context"
	"errors"
)

// Multi publishes every event to each of its publishers in order, e.g. the
// log, the dashboard feed and EventBridge. A failing publisher does not
// keep the events from the others; their errors are joined.
type Multi []Publisher

var _ Publisher = Multi(nil)

// Publish hands events to every publisher and joins their errors.
func (m Multi) Publish(ctx context.Context, events ...Event) error {
	if len(events) == 0 {
		return nil
	}
	var errs []error
	for _, p := range m {
		if p == nil {
			continue
		}
		if err := p.Publish(ctx, events...); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
