package bench

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMachineShares(t *testing.T) {
	// Two readings of a 2-CPU machine's /proc/stat one second apart (100
	// ticks per CPU), 30 of the 200 ticks stolen.
	before := parseMachineTicks("cpu  1000 10 500 8000 100 0 50 200 0 0\ncpu0 500 5 250 4000 50 0 25 100 0 0\nintr 1\n")
	after := parseMachineTicks("cpu  1090 10 520 8040 110 0 60 230 0 0\ncpu0 545 5 260 4020 55 0 30 115 0 0\nintr 2\n")
	if before.total != 9860 || before.steal != 200 {
		t.Fatalf("before = %+v, want total 9860 and steal 200", before)
	}
	// Other processes used 0.4 CPU seconds (40 ticks).
	steal, other := shares(before, after, 0.4)
	if math.Abs(steal-0.15) > 1e-9 || math.Abs(other-0.20) > 1e-9 {
		t.Fatalf("steal %.3f, other %.3f; want 0.150 and 0.200", steal, other)
	}
	c := cpuUse{Steal: steal, Other: other}
	if math.Abs(c.left()-0.65) > 1e-9 {
		t.Fatalf("left %.3f, want 0.650", c.left())
	}
	if got := parseMachineTicks("intr 1\n"); got != (machineTicks{}) {
		t.Fatalf("a /proc/stat without its cpu line read as %+v", got)
	}
}

func TestProcessCPUSkipsKernelThreadsAndItself(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: the bench's CPU figures need Linux")
	}
	// kthreadd, pid 2, is the parent of every kernel thread; a container
	// with a PID namespace of its own sees none.
	comm, _ := os.ReadFile("/proc/2/comm")
	kthreadd := strings.TrimSpace(string(comm)) == "kthreadd"
	if kthreadd && !readProcStat("2").kernel {
		t.Fatal("pid 2 (kthreadd) not read as a kernel thread")
	}
	// The kernel keeps the first 15 bytes of the executable's name.
	name := filepath.Base(os.Args[0])
	name = name[:min(len(name), 15)]
	if self := readProcStat("self"); self.kernel || self.comm != name {
		t.Fatalf("this process read as %+v, want the user process %q", self, name)
	}
	server, others := processCPU(0)
	if _, ok := others[os.Getpid()]; ok {
		t.Fatal("the bench counted itself among the other processes")
	}
	if _, ok := others[2]; ok && kthreadd {
		t.Fatal("a kernel thread counted among the other processes")
	}
	for pid := range server {
		if _, ok := others[pid]; ok {
			t.Fatalf("pid %d counted as PostgreSQL and as another process", pid)
		}
	}
}
