package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/devdb"
)

// StormPhase is one run of a duplicate storm.
type StormPhase struct {
	Redis      bool    `json:"redis"`
	Deliveries int     `json:"deliveries"`
	Claimed    int64   `json:"claimed"`
	Duplicates int64   `json:"duplicates"`
	Shortcut   float64 `json:"short_circuited"`
	RedisErrs  float64 `json:"redis_errors"`
	TxTotal    int64   `json:"db_transactions"`
	TxPerDeliv float64 `json:"db_transactions_per_delivery"`
	Rate       float64 `json:"ingest_deliveries_per_sec"`
	P50ms      float64 `json:"p50_ms"`
	P99ms      float64 `json:"p99_ms"`
	Errors     int64   `json:"errors"`
}

// StormOptions is one duplicate storm: every one of Events delivered
// Deliveries times from Clients keep-alive clients.
type StormOptions struct {
	Events, Deliveries, Clients int
	// RedisURL is Redis for the second run, when REDIS_URL is unset.
	RedisURL    string
	GroupCommit bool
	// The storm beside a CPU load: LoadEvents settled events, each then
	// delivered LoadRounds times again, while LoadThreads threads spin
	// (zero values take DefaultLoadEvents, DefaultLoadRounds and two per
	// core).
	LoadEvents, LoadRounds, LoadThreads int
}

// Storm delivers a duplicate storm to a service without Redis, then to one
// with it, and reports the database's transactions per delivery. Then it
// delivers duplicates of settled events beside a CPU load, without Redis
// and with it, and reports the ledger's index scans per duplicate and the
// latency: the load is when a retry storm comes, and when Redis answers
// slowest.
func Storm(ctx context.Context, o StormOptions, stdout, stderr io.Writer) error {
	cfg, err := config.LoadDev()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	if cfg.RedisURL != "" {
		o.RedisURL = cfg.RedisURL.Reveal()
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	admin, err := devdb.Server(ctx, cfg.DatabaseURL.Reveal(), logf)
	if err != nil {
		return err
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "hookledger:bench:" + hex.EncodeToString(b) + ":"
	var phases []StormPhase
	for _, withRedis := range []bool{false, true} {
		var env []string
		if withRedis {
			env = []string{"REDIS_URL=" + o.RedisURL, "REDIS_KEY_PREFIX=" + prefix, "REDIS_TIMEOUT=" + cfg.RedisTimeout.String()}
		}
		logf("bench-redis: %d events x %d deliveries from %d clients, Redis %t", o.Events, o.Deliveries, o.Clients, withRedis)
		p, err := stormPhase(ctx, admin, o, env)
		if err != nil {
			return err
		}
		p.Redis = withRedis
		phases = append(phases, p)
	}
	fmt.Fprintf(stdout, "%-12s %12s %10s %12s %9s %9s %10s\n", "", "deliveries", "tx/deliv", "deliveries/s", "p50 ms", "p99 ms", "shortcut")
	for _, p := range phases {
		fmt.Fprintf(stdout, "%-12s %12d %10.3f %12.0f %9.1f %9.1f %10.0f\n", phaseName(p.Redis), p.Deliveries, p.TxPerDeliv, p.Rate, p.P50ms, p.P99ms, p.Shortcut)
	}
	line, _ := json.Marshal(phases)
	fmt.Fprintln(stdout, string(line))
	for _, p := range phases {
		if p.Errors > 0 || p.Claimed != int64(o.Events) {
			return fmt.Errorf("%d request(s) failed, %d of %d events claimed", p.Errors, p.Claimed, o.Events)
		}
	}

	o.LoadEvents = or(o.LoadEvents, DefaultLoadEvents)
	o.LoadRounds = or(o.LoadRounds, DefaultLoadRounds)
	o.LoadThreads = or(o.LoadThreads, 2*runtime.NumCPU())
	var loaded []LoadedPhase
	for _, withRedis := range []bool{false, true} {
		var env []string
		if withRedis {
			// Markers outlive the restart between settling and the storm.
			env = []string{"REDIS_URL=" + o.RedisURL, "REDIS_KEY_PREFIX=" + prefix + "load:",
				"REDIS_TIMEOUT=" + cfg.RedisTimeout.String(), "REDIS_TTL=" + config.MaxRedisTTL.String()}
		}
		logf("bench-redis: %d settled events x %d duplicates from %d clients beside %d spinning threads, Redis %t",
			o.LoadEvents, o.LoadRounds, o.Clients, o.LoadThreads, withRedis)
		p, err := loadedPhase(ctx, admin, o, env)
		if err != nil {
			return err
		}
		p.Redis = withRedis
		loaded = append(loaded, p)
	}
	fmt.Fprintf(stdout, "\nbeside a CPU load (%d spinning threads on %d cores): %d settled events, %d duplicates each\n",
		o.LoadThreads, runtime.NumCPU(), o.LoadEvents, o.LoadRounds)
	fmt.Fprintf(stdout, "%-12s %10s %10s %9s %9s %10s %8s %11s %9s %8s\n", "", "duplicates", "scans/dup", "p50 ms", "p99 ms",
		"shortcut", "r errors", "timeout ms", "run queue", "load 1m")
	for _, p := range loaded {
		fmt.Fprintf(stdout, "%-12s %10d %10.3f %9.1f %9.1f %10.0f %8.0f %11.1f %9.1f %8.2f\n", phaseName(p.Redis), p.Duplicates,
			p.ScansPerDup, p.P50ms, p.P99ms, p.Shortcut, p.RedisErrs, p.TimeoutMs, p.RunQueue, p.LoadAvg)
	}
	line, _ = json.Marshal(loaded)
	fmt.Fprintln(stdout, string(line))
	for _, p := range loaded {
		if p.Errors > 0 {
			return fmt.Errorf("beside the CPU load: %d request(s) failed or claimed an event again", p.Errors)
		}
	}
	return nil
}

func phaseName(redis bool) string {
	if redis {
		return "+ Redis"
	}
	return "PostgreSQL"
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// stormPhase runs one storm against a fresh database and a service started
// with env, and counts the database's transactions from before the service
// starts until it has stopped.
func stormPhase(ctx context.Context, admin string, o StormOptions, env []string) (StormPhase, error) {
	r := StormPhase{Deliveries: o.Events * o.Deliveries}
	url, name, drop, err := benchDatabase(ctx, admin, "storm")
	if err != nil {
		return r, err
	}
	defer drop()
	// The real 7 KB Stripe event, the same bytes on every delivery of it.
	gen, err := loadPayloads("testdata/providers", "storm", []benchTemplate{subscriptionUpdated})
	if err != nil {
		return r, err
	}
	before, err := settledXacts(ctx, admin, name)
	if err != nil {
		return r, err
	}
	svc, err := startBenchService(url, config.RoleAll, o.GroupCommit, config.DefaultWorkers, o.Clients, env...)
	if err != nil {
		return r, err
	}
	defer svc.stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Clients, MaxConnsPerHost: o.Clients}, Timeout: 30 * time.Second}
	start := time.Now()
	lat := storm(ctx, client, svc.url, gen, o, &r)
	r.Rate = float64(r.Deliveries) / time.Since(start).Seconds()
	pct := percentiles(lat)
	r.P50ms, r.P99ms = pct.P50, pct.P99
	r.Shortcut = ScrapeSample(client, svc.url, `hookledger_redis_shortcircuit_total{source="stripe"}`)
	r.RedisErrs = ScrapeSample(client, svc.url, `hookledger_redis_errors_total{op="lookup"}`) + ScrapeSample(client, svc.url, `hookledger_redis_errors_total{op="mark"}`)
	if _, err := svc.waitSettled(ctx, o.Events, 0); err != nil {
		return r, err
	}
	svc.stop()
	after, err := settledXacts(ctx, admin, name)
	if err != nil {
		return r, err
	}
	r.TxTotal = after - before
	r.TxPerDeliv = float64(r.TxTotal) / float64(r.Deliveries)
	return r, nil
}

// storm posts each event o.Deliveries times, round after round (every
// event once, then every event again ...), from o.Clients goroutines.
func storm(ctx context.Context, hc *http.Client, base string, gen *payloads, o StormOptions, r *StormPhase) []time.Duration {
	var (
		next    atomic.Int64
		claimed atomic.Int64
		dups    atomic.Int64
		errs    atomic.Int64
		mu      sync.Mutex
		lat     = make([]time.Duration, 0, r.Deliveries)
		wg      sync.WaitGroup
	)
	for range o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, r.Deliveries/o.Clients+1)
			for {
				n := int(next.Add(1)) - 1
				if n >= r.Deliveries {
					break
				}
				body := gen.event(n % o.Events).Body
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/webhooks/stripe", bytes.NewReader(body))
				req.Header.Set("Stripe-Signature", provider.SignStripe(benchSecret, time.Now().Unix(), body))
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					errs.Add(1)
					continue
				}
				var out struct{ Status string }
				_ = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				local = append(local, time.Since(t0))
				switch {
				case resp.StatusCode != http.StatusOK:
					errs.Add(1)
				case out.Status == "claimed":
					claimed.Add(1)
				default:
					dups.Add(1)
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	r.Claimed, r.Duplicates, r.Errors = claimed.Load(), dups.Load(), errs.Load()
	return lat
}

// settledXacts returns the database's transactions once no connection to
// it is left, so that every backend has flushed its statistics.
func settledXacts(ctx context.Context, admin, name string) (int64, error) {
	if err := waitClosed(ctx, admin, name); err != nil {
		return 0, err
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, name).Scan(&n)
	return n, err
}

// waitClosed waits until no connection to the database name is left.
func waitClosed(ctx context.Context, admin, name string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, name).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("connections to %s did not close", name)
		}
	}
}

// ScrapeSample reads one sample from the service's /metrics (0 when absent).
func ScrapeSample(hc *http.Client, base, sample string) float64 {
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}
