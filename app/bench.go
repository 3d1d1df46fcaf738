package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/migrations"
	"github.com/hookledger/hookledger/modules/devdb"
	"github.com/hookledger/hookledger/modules/ledger"
	"github.com/hookledger/hookledger/modules/provider"
)

// BenchReport is what `hookledger bench` measured.
type BenchReport struct {
	Events      int     `json:"events"`
	Clients     int     `json:"clients"`
	GroupCommit bool    `json:"group_commit"`
	RawTxPerSec float64 `json:"raw_db_events_per_sec"`
	IngestRate  float64 `json:"ingest_events_per_sec"`
	Ratio       float64 `json:"ingest_to_raw_ratio"`
	P50ms       float64 `json:"p50_ms"`
	P95ms       float64 `json:"p95_ms"`
	P99ms       float64 `json:"p99_ms"`
	SettleRate  float64 `json:"settle_events_per_sec"`
	HalfRate    float64 `json:"half_rate_events_per_sec"`
	HalfP50ms   float64 `json:"half_rate_p50_ms"`
	HalfP99ms   float64 `json:"half_rate_p99_ms"`
	PeakRSSMB   float64 `json:"peak_rss_mb"`
	Errors      int64   `json:"errors"`
}

const benchSecret = "whsec_hookledger_bench"

func benchCommand() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench [--events N] [--clients C] [--group-commit=false] [--workers W]",
		Short: "Measure ingest, latency and settle rate against the raw database rate",
		Long: `Measure the service against the database's own limit: the raw rate of the
same claim-and-enqueue transaction done directly with pgx, one per event,
from the same number of clients, then the service's ingest, latency at peak
and half rate, settle rate and peak RSS, on a database of its own.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&o.events, "events", 20000, "events per phase")
	fl.IntVar(&o.clients, "clients", 64, "concurrent keep-alive clients")
	fl.BoolVar(&o.groupCommit, "group-commit", true, "run the service with group commit")
	fl.IntVar(&o.workers, "workers", config.DefaultWorkers, "apply workers of the service")
	return cmd
}

type benchOptions struct {
	events, clients, workers int
	groupCommit              bool
}

// runBench measures the service against the database's own limit: the raw
// rate of the same claim-and-enqueue transaction done directly with pgx,
// one per event, from the same number of clients.
func runBench(ctx context.Context, o benchOptions, stdout, stderr io.Writer) error {
	if o.events < 1 || o.clients < 1 || o.workers < 1 {
		return usageError("--events, --clients and --workers must be positive")
	}
	cfg, err := config.LoadDev()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	admin, err := devdb.Server(ctx, cfg.DatabaseURL.Reveal(), logf)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("hookledger_bench_%d", time.Now().UnixNano())
	url, err := devdb.EnsureDatabase(ctx, admin, name)
	if err != nil {
		return err
	}
	defer devdb.DropDatabase(context.Background(), admin, name) //nolint:errcheck
	ccfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	if err := migrations.Up(stdlib.OpenDB(*ccfg)); err != nil {
		return err
	}
	r := BenchReport{Events: o.events, Clients: o.clients, GroupCommit: o.groupCommit}

	logf("bench: raw database rate, %d events, %d clients, one transaction each", o.events, o.clients)
	if r.RawTxPerSec, err = rawClaimRate(ctx, url, o.events, o.clients); err != nil {
		return fmt.Errorf("raw rate: %w", err)
	}

	logf("bench: starting the service (group commit %t)", o.groupCommit)
	svc, err := startBenchService(url, o.groupCommit, o.workers, o.clients)
	if err != nil {
		return err
	}
	defer svc.stop()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.clients, MaxConnsPerHost: o.clients}, Timeout: 30 * time.Second}
	logf("bench: peak ingest, %d events from %d clients", o.events, o.clients)
	start := time.Now()
	lat, errs := drive(ctx, client, svc.url, "peak", o.events, o.clients, 0)
	elapsed := time.Since(start)
	r.Errors += errs
	r.IngestRate = float64(o.events) / elapsed.Seconds()
	r.Ratio = r.IngestRate / r.RawTxPerSec
	r.P50ms, r.P95ms, r.P99ms = percentile(lat, 50), percentile(lat, 95), percentile(lat, 99)
	if err := svc.waitSettled(ctx, o.events); err != nil {
		return err
	}
	r.SettleRate = float64(o.events) / time.Since(start).Seconds()

	r.HalfRate = r.IngestRate / 2
	logf("bench: latency at half the peak rate (%.0f events/s)", r.HalfRate)
	lat, errs = drive(ctx, client, svc.url, "half", o.events/2, o.clients, r.HalfRate)
	r.Errors += errs
	r.HalfP50ms, r.HalfP99ms = percentile(lat, 50), percentile(lat, 99)
	r.PeakRSSMB = svc.peakRSSMB()

	fmt.Fprintf(stdout, "raw one-transaction-per-event rate  %8.0f events/s\n", r.RawTxPerSec)
	fmt.Fprintf(stdout, "ingest (accepted) rate              %8.0f events/s  (%.2fx raw)\n", r.IngestRate, r.Ratio)
	fmt.Fprintf(stdout, "latency at peak                     p50 %.1f ms  p95 %.1f ms  p99 %.1f ms\n", r.P50ms, r.P95ms, r.P99ms)
	fmt.Fprintf(stdout, "settle rate                         %8.0f events/s\n", r.SettleRate)
	fmt.Fprintf(stdout, "latency at %.0f events/s (half)      p50 %.1f ms  p99 %.1f ms\n", r.HalfRate, r.HalfP50ms, r.HalfP99ms)
	fmt.Fprintf(stdout, "service peak RSS                    %8.1f MB\n", r.PeakRSSMB)
	line, _ := json.Marshal(r)
	fmt.Fprintln(stdout, string(line))
	if r.Errors > 0 {
		return fmt.Errorf("%d request(s) failed", r.Errors)
	}
	return nil
}

// rawClaimRate runs the claim-and-enqueue transaction directly with pgx:
// INSERT ... ON CONFLICT DO NOTHING RETURNING plus River's job insert, one
// transaction per event, from clients goroutines.
func rawClaimRate(ctx context.Context, url string, events, clients int) (float64, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return 0, err
	}
	pcfg.MaxConns = int32(clients)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return 0, err
	}
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(events) {
					return
				}
				id := fmt.Sprintf("evt_raw_%d", i)
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					var rowID int64
					err := tx.QueryRow(ctx, `
						INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, headers)
						VALUES ('raw', $1, 'stripe', 'stripe', 'customer.subscription.updated', $2, '{}')
						ON CONFLICT (namespace, event_id) DO NOTHING RETURNING id`, id, benchEvent(id, int(i))).Scan(&rowID)
					if err != nil {
						return err
					}
					_, err = rc.InsertTx(ctx, tx, ledger.ApplyArgs{Namespace: "raw", EventID: id}, nil)
					return err
				})
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, ok := firstErr.Load().(error); ok {
		return 0, err
	}
	if _, err := pool.Exec(ctx, `DELETE FROM river_job; DELETE FROM webhook_event`); err != nil {
		return 0, err
	}
	return float64(events) / elapsed.Seconds(), nil
}

func benchEvent(id string, i int) string {
	return fmt.Sprintf(`{"id":%q,"object":"event","type":"customer.subscription.updated","created":%d,"data":{"object":{"id":"sub_bench_%d","object":"subscription","customer":"cus_bench","status":"active","items":{"data":[{"price":{"id":"price_bench"}}]}}}}`,
		id, 1_700_000_000+i, i%500)
}

// drive posts events signed events from clients goroutines, open loop at
// rate (0: as fast as they go), and returns each request's latency.
func drive(ctx context.Context, hc *http.Client, base, phase string, events, clients int, rate float64) ([]time.Duration, int64) {
	var (
		next   atomic.Int64
		errs   atomic.Int64
		mu     sync.Mutex
		lat    = make([]time.Duration, 0, events)
		wg     sync.WaitGroup
		starts <-chan time.Time
	)
	if rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		starts = t.C
	}
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, events/clients+1)
			for {
				if starts != nil {
					<-starts
				}
				i := next.Add(1)
				if i > int64(events) {
					break
				}
				id := fmt.Sprintf("evt_%s_%d", phase, i)
				body := []byte(benchEvent(id, int(i)))
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/webhooks/stripe", bytes.NewReader(body))
				req.Header.Set("Stripe-Signature", provider.SignStripe(benchSecret, time.Now().Unix(), body))
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					errs.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				local = append(local, time.Since(t0))
				if resp.StatusCode != http.StatusOK {
					errs.Add(1)
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return lat, errs.Load()
}

func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	i := min(len(d)-1, int(float64(len(d))*p/100))
	return float64(d[i]) / float64(time.Millisecond)
}

// benchService is the service under test, a process of its own so that its
// memory is measured alone.
type benchService struct {
	cmd *exec.Cmd
	url string
	db  *pgxpool.Pool
}

func startBenchService(databaseURL string, groupCommit bool, workers, clients int, env ...string) (*benchService, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(exe, "serve")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+databaseURL, "HTTP_ADDR="+addr, "STRIPE_WEBHOOK_SECRET="+benchSecret,
		"LOG_LEVEL=warn", "CLAIM_GROUP_COMMIT="+strconv.FormatBool(groupCommit), "WORKERS="+strconv.Itoa(workers),
		"DB_MAX_CONNS="+strconv.Itoa(workers+clients/2+8), "CLAIM_TIMEOUT=10s")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &benchService{cmd: cmd, url: "http://" + addr}
	if s.db, err = pgxpool.New(context.Background(), databaseURL); err != nil {
		s.stop()
		return nil, err
	}
	for i := 0; ; i++ {
		resp, err := http.Get(s.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if i > 300 {
			s.stop()
			return nil, fmt.Errorf("service did not become ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *benchService) waitSettled(ctx context.Context, n int) error {
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var settled int
		if err := s.db.QueryRow(ctx, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`).Scan(&settled); err != nil {
			return err
		}
		if settled >= n {
			return nil
		}
	}
	return fmt.Errorf("events did not settle in 10 minutes")
}

// peakRSSMB reads the service's high-water resident set size.
func (s *benchService) peakRSSMB() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
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

func (s *benchService) stop() {
	if s.db != nil {
		s.db.Close()
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}
