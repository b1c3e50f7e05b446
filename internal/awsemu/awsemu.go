// Package awsemu starts local emulators of the AWS APIs for tests, so the
// AWS adapters run their conformance suites with plain `go test`, no AWS
// account and no Docker. The emulators are npm packages installed in
// tools/emulators (`make emulators`).
//
// Rules: an endpoint given in the environment wins (QUNFA_TEST_DYNAMODB_ENDPOINT,
// QUNFA_TEST_SQS_ENDPOINT). Otherwise the emulator is started on 127.0.0.1.
// If it cannot be started, tests skip with a loud reason — unless
// QUNFA_REQUIRE_EMULATORS=1, where they fail.
package awsemu

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/qunfa/qunfa/internal/emulators"
)

// Required reports whether missing emulators must fail tests (CI).
func Required() bool { return os.Getenv("QUNFA_REQUIRE_EMULATORS") == "1" }

// Unavailable skips or fails tb, depending on Required, with a loud reason.
func Unavailable(tb testing.TB, what string, err error) {
	tb.Helper()
	msg := fmt.Sprintf("EMULATOR UNAVAILABLE: %s: %v (run `make emulators`; QUNFA_REQUIRE_EMULATORS=1 turns this skip into a failure)", what, err)
	if Required() {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
}

// ToolsDir finds tools/emulators (emulators.ToolsDir).
func ToolsDir() (string, error) { return emulators.ToolsDir() }

// Bin returns the path of an installed emulator's executable.
func Bin(name string) (string, error) { return emulators.Bin(name) }

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort() (int, error) { return emulators.FreePort() }

// Process is a started emulator.
type Process = emulators.Process

// Start runs an emulator command (emulators.Start: own process group,
// 127.0.0.1 only) and registers it for StopAll.
func Start(ctx context.Context, name string, env []string, args func(port int) []string) (*Process, error) {
	p, err := emulators.Start(ctx, name, env, args)
	if err != nil {
		return nil, err
	}
	register(p)
	return p, nil
}

// started holds every emulator Start launched, so StopAll can end them when
// the test process exits.
var started struct {
	mu    sync.Mutex
	procs []*Process
}

func register(p *Process) {
	started.mu.Lock()
	started.procs = append(started.procs, p)
	started.mu.Unlock()
}

// StopAll stops every emulator started by this process. Call it from
// TestMain after m.Run, so no emulator outlives the test binary.
func StopAll() {
	started.mu.Lock()
	procs := started.procs
	started.procs = nil
	started.mu.Unlock()
	for _, p := range procs {
		p.Stop()
	}
}
