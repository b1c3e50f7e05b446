package devstack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes an exclusive lock on the data directory, so two local
// stacks never share one store and queue (a restarted stack releases the
// queue messages its previous life held, which is only safe when that life
// is over). The lock goes with the process, even on SIGKILL.
func lockDataDir(dir string) (func() error, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data directory %s is in use by another qunfa dev", dir)
		}
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	return f.Close, nil
}
