//go:build unix

package logstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive lock on dir/LOCK without waiting, so that a
// second process on the same data dir fails at once with a clear error
// (raft-wal's meta store would wait forever for its own lock). The lock
// lasts until the returned function runs or the process ends.
func lockDir(dir string) (func() error, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another process (it holds the lock on %s): stop that process, or give this node a data dir of its own", dir, path)
		}
		return nil, fmt.Errorf("lock %s (is another sluice using this data dir?): %w", path, err)
	}
	return f.Close, nil
}
