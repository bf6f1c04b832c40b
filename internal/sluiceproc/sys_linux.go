package sluiceproc

import "syscall"

// dieWithParent makes a started process die with this one.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
