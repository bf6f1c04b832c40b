//go:build !linux

package logstore

import "os"

// allocate writes size bytes to f.
func allocate(f *os.File, size int64) error { return writeZeros(f, size) }
