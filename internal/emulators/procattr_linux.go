package emulators

import "syscall"

// procAttr puts an emulator in its own process group and has the kernel
// kill it when the process that started it dies (even by SIGKILL).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
