package dbtest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestChildDiesWithTheTestBinary: a process started with DiesWithTest is
// killed when the test binary that started it is killed (as a go test
// timeout kills it), instead of running on.
func TestChildDiesWithTheTestBinary(t *testing.T) {
	if os.Getenv("DBTEST_CHILD_PARENT") == "1" {
		// The parent: start a long sleep, say its pid, and wait to be killed.
		cmd := exec.Command("sleep", "600")
		DiesWithTest(cmd)
		if err := cmd.Start(); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(cmd.Process.Pid)
		select {}
	}
	parent := exec.Command(os.Args[0], "-test.run", "^TestChildDiesWithTheTestBinary$")
	parent.Env = append(os.Environ(), "DBTEST_CHILD_PARENT=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(line[:len(line)-1])
	if err != nil {
		t.Fatalf("parent said %q", line)
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	deadline := time.Now().Add(Patience)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the child %d outlived its parent", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid runs (a zombie of a dead parent is reaped by
// init and counts as gone).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	for i := len(b) - 1; i > 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return b[i+2] != 'Z'
		}
	}
	return true
}
