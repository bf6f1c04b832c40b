//go:build linux

package logstore

import (
	"errors"
	"os"
	"syscall"
)

// allocate reserves size bytes for f (fallocate), as raft-wal does for a
// new segment; where the file system cannot, it writes them.
func allocate(f *os.File, size int64) error {
	err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return writeZeros(f, size)
	}
	return err
}
