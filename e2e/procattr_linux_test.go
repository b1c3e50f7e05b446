package e2e

import "syscall"

// childProcAttr makes a child die with the test binary (a timeout or a
// panic of the tests must not leave servers running).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
