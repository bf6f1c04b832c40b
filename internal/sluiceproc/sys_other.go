//go:build !linux

package sluiceproc

import "syscall"

// dieWithParent is empty where Pdeathsig does not exist.
func dieWithParent() *syscall.SysProcAttr { return nil }
