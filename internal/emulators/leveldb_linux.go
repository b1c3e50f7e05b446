package emulators

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// waitLevelDBFree waits until no process holds the LevelDB lock of dir
// (the fcntl write lock LevelDB takes on dir/LOCK). A dynalite of a
// killed process dies with it, but not at once: a new dynalite that
// opened the same store meanwhile would fail its first requests.
func waitLevelDBFree(ctx context.Context, dir string, within time.Duration) error {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil // a new store
	}
	if err != nil {
		return fmt.Errorf("open the LevelDB lock: %w", err)
	}
	defer f.Close()
	deadline := time.Now().Add(within)
	for {
		lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0}
		err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk)
		if err == nil {
			lk.Type = syscall.F_UNLCK
			_ = syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk)
			return nil
		}
		if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EACCES) {
			return fmt.Errorf("check the LevelDB lock: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the DynamoDB data in %s is still in use by another dynalite after %v", dir, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
