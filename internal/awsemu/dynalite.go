package awsemu

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// dynalite is the process-wide DynamoDB emulator, started at most once.
var dynalite struct {
	once     sync.Once
	endpoint string
	err      error
}

// DynamoDB returns the endpoint of a DynamoDB API for tests:
// QUNFA_TEST_DYNAMODB_ENDPOINT when set, otherwise a dynalite emulator
// started once per test process (in memory, tables created and deleted
// instantly). When neither is available tb is skipped, or failed under
// QUNFA_REQUIRE_EMULATORS=1. Call StopAll from TestMain to stop it.
func DynamoDB(tb testing.TB) string {
	tb.Helper()
	if ep := os.Getenv("QUNFA_TEST_DYNAMODB_ENDPOINT"); ep != "" {
		return ep
	}
	dynalite.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p, err := Start(ctx, "dynalite", nil, func(port int) []string {
			return []string{
				"--host", "127.0.0.1",
				"--port", strconv.Itoa(port),
				"--createTableMs", "0",
				"--deleteTableMs", "0",
				"--updateTableMs", "0",
			}
		})
		if err != nil {
			dynalite.err = err
			return
		}
		dynalite.endpoint = p.Endpoint
	})
	if dynalite.err != nil {
		Unavailable(tb, "dynalite (DynamoDB emulator)", dynalite.err)
	}
	return dynalite.endpoint
}
