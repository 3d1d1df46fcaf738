package bench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat times.
const clockTicks = 100

// cpuUse is CPU seconds per 1,000 events, read from /proc: stable where
// rates are not, on a shared machine.
type cpuUse struct {
	// Service is the hookledger process (HTTP, verification, claims and,
	// in role all, the apply workers).
	Service float64 `json:"service_s_per_1k"`
	// Backends are the PostgreSQL backends connected to the bench database.
	Backends float64 `json:"pg_backends_s_per_1k"`
	// Server is every PostgreSQL process, the WAL writer and checkpointer
	// included, and also the backends of other databases on the server.
	Server float64 `json:"pg_server_s_per_1k"`
	// Load is the load generator (signing, HTTP client).
	Load float64 `json:"load_s_per_1k"`
	// Steal is the share of the machine's CPU time the hypervisor gave to
	// other guests during the phase, and Other the share that user
	// processes outside the phase used (other work on a shared machine;
	// processes that ended before the phase did are missed), both against
	// the machine's CPU time from /proc/stat. A phase that lost a fifth of
	// the machine ran about a fifth slower whatever its code. Kernel
	// threads (the journal, the network) are in neither: they work for
	// the phase as often as not.
	Steal float64 `json:"steal_share"`
	Other float64 `json:"other_share"`
}

// left is the share of the machine's CPU time that was the phase's to
// use: what steal and other processes did not take.
func (c cpuUse) left() float64 { return max(1-c.Steal-c.Other, 0.05) }

// meter reads the CPU time of the processes a phase runs on.
type meter struct {
	db         *pgxpool.Pool
	servicePID int
}

type cpuSnap struct {
	service, load            float64
	server, backends, others map[int]float64
	machine                  machineTicks
}

// machineTicks is the machine's CPU time from the first line of
// /proc/stat, in clock ticks summed over its CPUs.
type machineTicks struct {
	total, steal float64
}

// readMachineTicks reads /proc/stat; zero when it cannot.
func readMachineTicks() machineTicks {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTicks{}
	}
	return parseMachineTicks(string(b))
}

// parseMachineTicks reads the aggregate "cpu" line: user, nice, system,
// idle, iowait, irq, softirq, steal (guest time is already in user).
func parseMachineTicks(stat string) machineTicks {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineTicks{}
	}
	var v [8]float64
	for i := range v {
		v[i], _ = strconv.ParseFloat(f[i+1], 64)
	}
	t := machineTicks{steal: v[7]}
	for _, x := range v {
		t.total += x
	}
	return t
}

// procCPU is a process's user plus system time in seconds, 0 when gone.
func procCPU(pid string) float64 { return readProcStat(pid).cpu }

// pfKthread is PF_KTHREAD in /proc/<pid>/stat's flags.
const pfKthread = 0x00200000

// procStat is what the bench reads of /proc/<pid>/stat.
type procStat struct {
	// comm is the command name, cpu the user plus system time in seconds,
	// and kernel says the process is a kernel thread.
	comm   string
	cpu    float64
	kernel bool
}

// readProcStat reads /proc/<pid>/stat; zero when the process is gone.
func readProcStat(pid string) procStat {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return procStat{}
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after it.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return procStat{}
	}
	flags, _ := strconv.ParseUint(f[6], 10, 64)
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return procStat{comm: s[open+1 : end], cpu: (utime + stime) / clockTicks, kernel: flags&pfKthread != 0}
}

// processCPU reads the CPU time of every postgres process and of every
// other user process but this one and the service, by pid.
func processCPU(servicePID int) (server, others map[int]float64) {
	entries, _ := os.ReadDir("/proc")
	server, others = map[int]float64{}, map[int]float64{}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == servicePID {
			continue
		}
		switch st := readProcStat(e.Name()); {
		case st.kernel:
		case st.comm == "postgres":
			server[pid] = st.cpu
		default:
			others[pid] = st.cpu
		}
	}
	return server, others
}

// grown sums the CPU each process spent since before; a process that
// started in between counts from zero, one that ended is lost.
func grown(before, after map[int]float64) float64 {
	var sum float64
	for pid, t := range after {
		sum += t - before[pid]
	}
	return sum
}

func (m *meter) snapshot(ctx context.Context) cpuSnap {
	s := cpuSnap{load: procCPU("self"), backends: map[int]float64{}, machine: readMachineTicks()}
	s.server, s.others = processCPU(m.servicePID)
	if m.servicePID > 0 {
		s.service = procCPU(strconv.Itoa(m.servicePID))
	}
	rows, err := m.db.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return s
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			s.backends[pid] = procCPU(strconv.Itoa(pid))
		}
	}
	return s
}

// since is the CPU spent since snapshot before, per 1,000 of events. The
// pools keep their connections open, so no backend is lost.
func (m *meter) since(ctx context.Context, before cpuSnap, events int) cpuUse {
	after := m.snapshot(ctx)
	k := 1000 / float64(events)
	c := cpuUse{
		Service:  (after.service - before.service) * k,
		Backends: grown(before.backends, after.backends) * k,
		Server:   grown(before.server, after.server) * k,
		Load:     (after.load - before.load) * k,
	}
	c.Steal, c.Other = shares(before.machine, after.machine, grown(before.others, after.others))
	return c
}

// shares is the part of the machine's CPU time between two readings that
// steal took, and that other processes used (others, CPU seconds).
func shares(before, after machineTicks, others float64) (steal, other float64) {
	total := after.total - before.total
	if total <= 0 {
		return 0, 0
	}
	return (after.steal - before.steal) / total, min(others*clockTicks/total, 1)
}

// peakRSSMB reads a process's high-water resident set size.
func peakRSSMB(pid int) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
