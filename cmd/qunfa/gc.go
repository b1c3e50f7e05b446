package main

import (
	"os"
	"runtime/debug"
)

// serverGCPercent is the garbage collector target of the long-running
// commands (qunfa dev, qunfa mock-provider). They allocate a little per
// message at thousands of messages per second; collecting less often
// trades some memory for about 12% more messages per second end to end
// (BenchmarkEndToEnd20k: 13,500–14,300 → 15,200–15,800 msg/s on 2 cores).
const serverGCPercent = 400

// serverMemoryLimit is the soft memory limit of the same commands. With
// GOGC 400 the heap may grow to five times what is live, so a burst of
// garbage (planning a staged job, a part upload) took qunfa dev to 600
// MiB resident on a 1,000,000-recipient job; under the limit the
// collector runs sooner only when the heap nears it, and the process stays
// under DESIGN.md's 256 MiB (SQLite's own memory is outside the limit).
const serverMemoryLimit = 192 << 20

// tuneGC applies serverGCPercent and serverMemoryLimit unless GOGC and
// GOMEMLIMIT say otherwise.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serverGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(serverMemoryLimit)
	}
}
