// Package e2e judges qunfa the way a user sees it: the `qunfa` binary runs
// as separate processes (`qunfa mock-provider` and `qunfa dev`), the tests
// talk to them over HTTP only, and they decide what was delivered from the
// mock provider's JSON-lines delivery log, never from qunfa's own store.
//
// TestMain builds the binary once. Every test starts its own processes on
// free 127.0.0.1 ports with their own data directories, captures their
// stderr to files and prints the tail of them when it fails. `go test
// -short` skips the slowest scenarios; `make bench` runs
// BenchmarkEndToEnd20k.
package e2e
