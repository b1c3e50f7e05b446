package reconcile_test

import (
	"testing"
	"time"
)

// waitLimit bounds every wait of a test on another goroutine: a pass that
// blocks fails the test with a message instead of hanging until go test's
// own timeout.
const waitLimit = 10 * time.Second

// recv returns the next value of ch, or fails the test after waitLimit.
// Call it from the test's goroutine.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("%s: nothing after %v", what, waitLimit)
	}
	var zero T
	return zero
}

// released reports whether ch was closed within waitLimit, for hooks that
// run outside the test's goroutine.
func released(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(waitLimit):
		return false
	}
}
