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
}

// meter reads the CPU time of the processes a phase runs on.
type meter struct {
	db         *pgxpool.Pool
	servicePID int
}

type cpuSnap struct {
	service, load    float64
	server, backends map[int]float64
}

// procCPU is a process's user plus system time in seconds, 0 when gone.
func procCPU(pid string) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / clockTicks
}

// serverCPU reads the CPU time of every postgres process, by pid.
func serverCPU() map[int]float64 {
	entries, _ := os.ReadDir("/proc")
	cpu := map[int]float64{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		cpu[pid] = procCPU(e.Name())
	}
	return cpu
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
	s := cpuSnap{server: serverCPU(), load: procCPU("self"), backends: map[int]float64{}}
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
	return cpuUse{
		Service:  (after.service - before.service) * k,
		Backends: grown(before.backends, after.backends) * k,
		Server:   grown(before.server, after.server) * k,
		Load:     (after.load - before.load) * k,
	}
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
