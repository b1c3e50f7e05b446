//go:build !linux

package emulators

import "syscall"

// procAttr puts an emulator in its own process group.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
