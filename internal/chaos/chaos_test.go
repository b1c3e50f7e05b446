package chaos_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// Runs: QUNFA_CHAOS_RUNS sets how many (default 40, the short suite that
// runs inside `make test`; `make chaos` runs 500 and more), and
// QUNFA_CHAOS_SEED replays one seed. The first seed of a batch is
// QUNFA_CHAOS_BASE when set; else the short suite runs a fixed batch (a
// red `make test` is then a regression, not a new draw), and any other
// number of runs starts from a seed drawn from the time. Either way the
// first seed is printed.
func seeds(t *testing.T, defaultRuns int) []uint64 {
	t.Helper()
	if s := os.Getenv("QUNFA_CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("QUNFA_CHAOS_SEED=%q: %v", s, err)
		}
		return []uint64{seed}
	}
	runs := defaultRuns
	if s := os.Getenv("QUNFA_CHAOS_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("QUNFA_CHAOS_RUNS=%q: want a positive number", s)
		}
		runs = n
	}
	base := uint64(time.Now().UnixNano()) % 1_000_000_000 * 1000
	if runs == defaultRuns {
		base = fixedBase
	}
	if s := os.Getenv("QUNFA_CHAOS_BASE"); s != "" {
		b, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("QUNFA_CHAOS_BASE=%q: %v", s, err)
		}
		base = b
	}
	t.Logf("%d runs from seed %d (QUNFA_CHAOS_BASE=%d repeats the batch, QUNFA_CHAOS_SEED=<seed> one run)", runs, base, base)
	out := make([]uint64, runs)
	for i := range out {
		out[i] = base + uint64(i)
	}
	return out
}

// fixedBase is the first seed of the short suite's fixed batch.
const fixedBase = 1_000_000

// TestChaos runs the whole pipeline on SQLite under random faults, crashes
// and operator actions, seed after seed, and judges each run (see
// harness_test.go, judge).
func TestChaos(t *testing.T) {
	for _, seed := range seeds(t, 40) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			chaosRun(t, seed, sqliteBackend)
		})
	}
}
