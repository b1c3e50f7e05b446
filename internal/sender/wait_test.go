package sender_test

import (
	"sync"
	"time"
)

// waitLimit bounds every wait of a test on another goroutine: a bug that
// blocks (a turn that never ends, a hook never reached) fails the test
// with a message instead of hanging until go test's own timeout.
const waitLimit = 10 * time.Second

// fataler is what the waits report to (*testing.T, *rapid.T).
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// recv returns the next value of ch, or fails the test after waitLimit.
// Call it from the test's goroutine.
func recv[T any](t fataler, ch <-chan T, what string) T {
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

// waitGroup waits for wg, or fails the test after waitLimit.
func waitGroup(t fataler, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	recv(t, done, what)
}

// released reports whether ch was closed within waitLimit: hooks and fake
// providers, which run outside the test's goroutine, return an error when
// it was not instead of blocking for ever.
func released(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(waitLimit):
		return false
	}
}
