//go:build !linux

package e2e

import "syscall"

// childProcAttr: only Linux can tie a child's life to its parent; elsewhere
// the tests' cleanups stop the children.
func childProcAttr() *syscall.SysProcAttr { return nil }
