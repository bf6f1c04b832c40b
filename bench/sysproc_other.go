//go:build !linux

package bench

import "syscall"

// sysProcAttr is empty where Pdeathsig does not exist.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// FSType is unknown off Linux.
func FSType(path string) string { return "unknown" }
