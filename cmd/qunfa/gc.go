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

// tuneGC applies serverGCPercent unless GOGC says otherwise.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serverGCPercent)
	}
}
