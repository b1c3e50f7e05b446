//go:build !linux

package emulators

import (
	"context"
	"time"
)

// waitLevelDBFree is a no-op where the emulators do not die with the
// process that started them.
func waitLevelDBFree(context.Context, string, time.Duration) error { return nil }
