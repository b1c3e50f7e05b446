package alert

import "context"

// Discard is a Publisher that drops every event, for tests and tools that
// have nobody to tell.
var Discard Publisher = discard{}

type discard struct{}

// Publish drops events and never fails.
func (discard) Publish(context.Context, ...Event) error { return nil }
