//go:build !linux

package dbtest

import "os/exec"

// DiesWithTest is a no-op where the kernel cannot signal a child when its
// parent dies; the tests' cleanups stop their processes.
func DiesWithTest(*exec.Cmd) {}
