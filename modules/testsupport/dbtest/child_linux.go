package dbtest

import (
	"os/exec"
	"syscall"
)

// DiesWithTest makes the process cmd starts receive SIGKILL when the test
// binary that started it dies, a go test timeout included, so that no
// server a test started outlives it. Call it before cmd.Start.
func DiesWithTest(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
