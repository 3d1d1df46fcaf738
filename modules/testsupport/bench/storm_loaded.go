package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/config"
)

// Defaults of the storm beside a CPU load.
const (
	// DefaultLoadEvents are settled before their duplicates arrive.
	DefaultLoadEvents = 200
	// DefaultLoadRounds is how many duplicates of each event the storm
	// delivers.
	DefaultLoadRounds = 5
	// loadBound is the longest a CPU load runs, whatever becomes of the
	// phase that started it.
	loadBound = 5 * time.Minute
)

// LoadedPhase is a duplicate storm on settled events, delivered while
// spinning threads load every core.
type LoadedPhase struct {
	Redis      bool  `json:"redis"`
	Events     int   `json:"events"`
	Duplicates int64 `json:"duplicates"`
	// IndexScans are the scans of webhook_event's indexes the storm cost
	// (the claim's probe of its unique key, the stored body read for a
	// duplicate's comparison); ScansPerDup divides them by the duplicates.
	IndexScans  int64   `json:"ledger_index_scans"`
	ScansPerDup float64 `json:"ledger_index_scans_per_duplicate"`
	Shortcut    float64 `json:"short_circuited"`
	RedisErrs   float64 `json:"redis_errors"`
	// Dropped are the markers not written while the events were settled.
	Dropped float64 `json:"markers_dropped"`
	// TimeoutMs is the Redis lookup timeout the service had learned at the
	// storm's end.
	TimeoutMs float64 `json:"redis_lookup_timeout_ms"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
	// RunQueue is the mean of the machine's runnable tasks during the
	// storm (/proc/stat procs_running); LoadAvg is the 1-minute load
	// average at its end.
	RunQueue float64 `json:"run_queue"`
	LoadAvg  float64 `json:"load_average"`
	Threads  int     `json:"load_threads"`
	Errors   int64   `json:"errors"`
}

// loadedPhase settles o.LoadEvents events on a fresh database, then, on a
// service started afresh, delivers each of them o.LoadRounds times again,
// all beside o.LoadThreads spinning threads; it counts webhook_event's
// index scans between the two services, each read once every connection
// of the service has closed and flushed its statistics.
func loadedPhase(ctx context.Context, admin string, o StormOptions, env []string) (LoadedPhase, error) {
	r := LoadedPhase{Events: o.LoadEvents, Threads: o.LoadThreads}
	url, name, drop, err := benchDatabase(ctx, admin, "stormload")
	if err != nil {
		return r, err
	}
	defer drop()
	gen, err := loadPayloads("testdata/providers", "stormload", []benchTemplate{subscriptionUpdated})
	if err != nil {
		return r, err
	}
	stopLoad := startCPULoad(o.LoadThreads, loadBound)
	defer stopLoad()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Clients, MaxConnsPerHost: o.Clients}, Timeout: 30 * time.Second}

	svc, err := startBenchService(url, config.RoleAll, o.GroupCommit, config.DefaultWorkers, o.Clients, env...)
	if err != nil {
		return r, err
	}
	first := StormPhase{Deliveries: o.LoadEvents}
	storm(ctx, client, svc.url, gen, StormOptions{Events: o.LoadEvents, Deliveries: 1, Clients: o.Clients}, &first)
	if first.Errors > 0 || first.Claimed != int64(o.LoadEvents) {
		svc.stop()
		return r, fmt.Errorf("settling the storm's events: %d request(s) failed, %d of %d claimed", first.Errors, first.Claimed, o.LoadEvents)
	}
	if _, err := svc.waitSettled(ctx, o.LoadEvents, 0); err != nil {
		svc.stop()
		return r, err
	}
	r.Dropped = ScrapeSample(client, svc.url, "hookledger_redis_markers_dropped_total")
	svc.stop()
	before, err := indexScans(ctx, admin, name, url)
	if err != nil {
		return r, err
	}

	svc, err = startBenchService(url, config.RoleAll, o.GroupCommit, config.DefaultWorkers, o.Clients, env...)
	if err != nil {
		return r, err
	}
	defer svc.stop()
	runQueue := sampleRunQueue()
	s := StormPhase{Deliveries: o.LoadEvents * o.LoadRounds}
	lat := storm(ctx, client, svc.url, gen, StormOptions{Events: o.LoadEvents, Deliveries: o.LoadRounds, Clients: o.Clients}, &s)
	r.RunQueue, r.LoadAvg = runQueue(), loadAverage()
	pct := percentiles(lat)
	r.P50ms, r.P99ms = pct.P50, pct.P99
	r.Duplicates, r.Errors = s.Duplicates, s.Errors+s.Claimed
	r.Shortcut = ScrapeSample(client, svc.url, `hookledger_redis_shortcircuit_total{source="stripe"}`)
	r.RedisErrs = ScrapeSample(client, svc.url, `hookledger_redis_errors_total{op="lookup"}`) +
		ScrapeSample(client, svc.url, `hookledger_redis_errors_total{op="mark"}`)
	r.TimeoutMs = 1000 * ScrapeSample(client, svc.url, "hookledger_redis_lookup_timeout_seconds")
	svc.stop()
	after, err := indexScans(ctx, admin, name, url)
	if err != nil {
		return r, err
	}
	r.IndexScans = after - before
	r.ScansPerDup = float64(r.IndexScans) / float64(max(r.Duplicates, 1))
	return r, nil
}

// indexScans returns the scans of webhook_event's indexes in the database
// name (at url) once no connection to it is left.
func indexScans(ctx context.Context, admin, name, url string) (int64, error) {
	if err := waitClosed(ctx, admin, name); err != nil {
		return 0, err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, `SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE relname = 'webhook_event'`).Scan(&n)
	return n, err
}

// startCPULoad spins threads goroutines, each with a processor of its own
// (GOMAXPROCS is raised by threads), so that they load every core beside
// the service, PostgreSQL and Redis as a busy neighbour would. They stop
// when stop is called or after bound, whichever comes first.
func startCPULoad(threads int, bound time.Duration) (stop func()) {
	prev := runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + threads)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	var (
		wg   sync.WaitGroup
		sink atomic.Uint64
	)
	for range threads {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			x := uint64(1)
			for ctx.Err() == nil {
				for range 1 << 16 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			sink.Add(x)
		})
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			runtime.GOMAXPROCS(prev)
		})
	}
}

// sampleRunQueue samples the machine's runnable tasks every 100 ms until
// the returned function is called, which returns their mean (0 where
// /proc/stat is not readable).
func sampleRunQueue() func() float64 {
	done := make(chan struct{})
	var (
		sum, n int
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if v, ok := procsRunning(); ok {
				sum += v
				n++
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() float64 {
		close(done)
		wg.Wait()
		if n == 0 {
			return 0
		}
		return float64(sum) / float64(n)
	}
}

// procsRunning reads procs_running from /proc/stat.
func procsRunning() (int, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("procs_running ")); ok {
			n, err := strconv.Atoi(string(v))
			return n, err == nil
		}
	}
	return 0, false
}

// loadAverage is the 1-minute load average (0 where /proc/loadavg is not
// readable).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := bytes.Cut(b, []byte(" "))
	v, _ := strconv.ParseFloat(string(f), 64)
	return v
}
