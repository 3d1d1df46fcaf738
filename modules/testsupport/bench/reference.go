package bench

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The reference design as a whole service (bench's reference service
// phases): the article's receiver and worker, written plainly in Go, run
// as a process of its own so that its CPU is measured as the service's
// is, and driven by the same load generator with the same payloads. The
// receiver is net/http: it verifies the Stripe signature (HMAC-SHA256 of
// "t.body", compared in constant time), reads the event's id and type,
// and in one statement, so one transaction, claims the event in the
// article's ledger table (INSERT ... ON CONFLICT DO NOTHING) and inserts
// its job row. Workers, as many as the service's apply workers, each
// apply one event per transaction: take a job (FOR UPDATE SKIP LOCKED),
// lease the ledger row as the article does, apply the subscription with
// the versioned upsert, settle the row and delete the job. An idle worker
// polls with a backoff from refPollMin to refPollMax.

// referenceServiceDDL adds the reference service's job table and business
// table beside the article's ledger (referenceDDL), in schema reference.
const referenceServiceDDL = `
CREATE TABLE IF NOT EXISTS reference.job (
    id        bigserial PRIMARY KEY,
    event_id  text NOT NULL
);

CREATE TABLE IF NOT EXISTS reference.subscription (
    stripe_id  text PRIMARY KEY,
    plan       text,
    state      text   NOT NULL,
    version    bigint NOT NULL
);
`

// refClaimSQL is the article's claim and the job row it enqueues, in one
// statement.
const refClaimSQL = `WITH c AS (
		INSERT INTO reference.webhook_event (event_id, source, event_type, payload)
		VALUES ($1, 'stripe', $2, $3::jsonb)
		ON CONFLICT (event_id) DO NOTHING
		RETURNING event_id)
	INSERT INTO reference.job (event_id) SELECT event_id FROM c`

// refTakeSQL takes the oldest job no other worker holds and leases its
// ledger row as the article's LEASE_SQL does, returning the payload.
const refTakeSQL = `WITH j AS (
		SELECT id, event_id FROM reference.job ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
	UPDATE reference.webhook_event e SET status = 'processing', attempts = e.attempts + 1
	FROM j WHERE e.event_id = j.event_id AND e.status IN ('claimed', 'failed')
	RETURNING j.id, j.event_id, e.payload`

// refApplySQL is the article's versioned write as an upsert with the same
// guard, so that an update arriving before its create still applies.
const refApplySQL = `INSERT INTO reference.subscription AS s (stripe_id, plan, state, version)
	VALUES ($1, $2, $3, $4)
	ON CONFLICT (stripe_id) DO UPDATE SET plan = EXCLUDED.plan, state = EXCLUDED.state, version = EXCLUDED.version
	WHERE s.version < EXCLUDED.version`

const (
	refPollMin = time.Millisecond
	refPollMax = 50 * time.Millisecond
	// refTolerance is Stripe's default signature tolerance.
	refTolerance = 5 * time.Minute
)

// setupReferenceService adds the reference service's tables.
func setupReferenceService(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, referenceServiceDDL)
	return err
}

// ServeReference runs the reference service on addr against the
// database at url, with workers apply workers and a pool of conns
// connections, until ctx ends.
func ServeReference(ctx context.Context, url, addr, secret string, workers, conns int) error {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	pcfg.MaxConns, pcfg.MinConns = int32(conns), int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	// Every connection is open before the service listens, as a tuned
	// pool keeps them: the first requests do not pay for them.
	held := make([]*pgxpool.Conn, 0, conns)
	for range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.Release()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: &refReceiver{pool: pool, secret: []byte(secret)}, ReadHeaderTimeout: loadTimeout}
	// A worker's failure stops the service, so that the bench sees it
	// exit rather than wait for events that no worker applies.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	for range workers {
		wg.Go(func() {
			if err := refWork(ctx, pool); err != nil {
				errs <- err
				cancel()
			}
		})
	}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs <- err
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// refReceiver is the reference design's webhook endpoint.
type refReceiver struct {
	pool   *pgxpool.Pool
	secret []byte
}

func (h *refReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/webhooks/stripe" {
		http.NotFound(w, r)
		return
	}
	var buf bytes.Buffer
	buf.Grow(int(min(max(r.ContentLength, 0), 64<<10)) + bytes.MinRead)
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, naiveMaxBody+1)); err != nil || buf.Len() > naiveMaxBody {
		http.Error(w, "unreadable or oversized body", http.StatusBadRequest)
		return
	}
	body := buf.Bytes()
	if err := verifyStripeSignature(r.Header.Get("Stripe-Signature"), body, h.secret, time.Now()); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var ev struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" {
		http.Error(w, "not a Stripe event", http.StatusBadRequest)
		return
	}
	// A duplicate inserts nothing and still gets 200.
	if _, err := h.pool.Exec(r.Context(), refClaimSQL, ev.ID, ev.Type, string(body)); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// verifyStripeSignature checks a Stripe-Signature header ("t=...,v1=...")
// against body: an HMAC-SHA256 of "t.body" keyed with the secret, compared
// in constant time, signed within refTolerance of now.
func verifyStripeSignature(header string, body, secret []byte, now time.Time) error {
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			if sig, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, sig)
			}
		}
	}
	at, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return errors.New("malformed Stripe-Signature")
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			if now.Sub(time.Unix(at, 0)) > refTolerance {
				return errors.New("signature too old")
			}
			return nil
		}
	}
	return errors.New("no v1 signature matches")
}

// refWork applies events one per transaction until ctx ends.
func refWork(ctx context.Context, pool *pgxpool.Pool) error {
	pause := refPollMin
	for {
		applied, err := refApplyOne(ctx, pool)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if applied {
			pause = refPollMin
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		pause = min(2*pause, refPollMax)
	}
}

// refStripeEvent is what the apply reads of a subscription event.
type refStripeEvent struct {
	Type    string `json:"type"`
	Created int64  `json:"created"`
	Data    struct {
		Object struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			Items  struct {
				Data []struct {
					Price struct {
						ID string `json:"id"`
					} `json:"price"`
				} `json:"data"`
			} `json:"items"`
		} `json:"object"`
	} `json:"data"`
}

// refApplyOne applies the oldest free job's event in one transaction:
// lease, apply, settle, delete the job. It says whether there was one.
func refApplyOne(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	applied := false
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var jobID int64
		var eventID string
		var raw []byte
		if err := tx.QueryRow(ctx, refTakeSQL).Scan(&jobID, &eventID, &raw); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		}
		var ev refStripeEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return fmt.Errorf("job %d: %w", jobID, err)
		}
		var b pgx.Batch
		obj := ev.Data.Object
		// The event's created is the version: one subscription's events
		// share its object's created.
		switch ev.Type {
		case "customer.subscription.created", "customer.subscription.updated":
			var plan *string
			if len(obj.Items.Data) > 0 {
				plan = &obj.Items.Data[0].Price.ID
			}
			b.Queue(refApplySQL, obj.ID, plan, obj.Status, ev.Created)
		case "customer.subscription.deleted":
			b.Queue(refApplySQL, obj.ID, nil, "canceled", ev.Created)
		}
		b.Queue(`UPDATE reference.webhook_event SET status = 'settled', settled_at = now() WHERE event_id = $1`, eventID)
		b.Queue(`DELETE FROM reference.job WHERE id = $1`, jobID)
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("job %d: %w", jobID, err)
		}
		applied = true
		return nil
	})
	return applied, err
}

// referenceService is the reference service as a child process of the
// bench: the bench's own executable with --serve-reference. exited is
// closed when the process has ended.
type referenceService struct {
	cmd    *exec.Cmd
	url    string
	db     *pgxpool.Pool
	exited chan struct{}
}

func startReferenceService(databaseURL string, workers, clients int) (*referenceService, error) {
	exe, addr, err := childSetup()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "bench", "--serve-reference="+addr, "--workers="+strconv.Itoa(workers),
		"--clients="+strconv.Itoa(clients))
	cmd.Env = append(os.Environ(), "DATABASE_URL="+databaseURL)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &referenceService{cmd: cmd, url: "http://" + addr, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	if s.db, err = pgxpool.New(context.Background(), databaseURL); err != nil {
		s.stop()
		return nil, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.exited:
			s.db.Close()
			return nil, fmt.Errorf("reference service exited at start")
		default:
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("reference service did not start")
		}
	}
}

// waitSettled waits until no job is left and n events are settled, and
// returns when the last one settled.
func (s *referenceService) waitSettled(ctx context.Context, n int) (time.Time, error) {
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var pending bool
		if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM reference.job)`).Scan(&pending); err != nil {
			return time.Time{}, err
		}
		if pending {
			continue
		}
		var settled int
		var last time.Time
		if err := s.db.QueryRow(ctx, `SELECT count(*), COALESCE(max(settled_at), now()) FROM reference.webhook_event WHERE status = 'settled'`).Scan(&settled, &last); err != nil {
			return time.Time{}, err
		}
		if settled >= n {
			return last, nil
		}
		select {
		case <-s.exited:
			return time.Time{}, fmt.Errorf("reference service exited with %d of %d events settled", settled, n)
		default:
		}
	}
	return time.Time{}, fmt.Errorf("reference events did not settle in 10 minutes")
}

func (s *referenceService) stop() {
	if s.db != nil {
		s.db.Close()
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.exited
}

// serviceRun is a service's peak ingest and end to end, measured alike
// for hookledger and the reference service.
type serviceRun struct {
	Ingest      float64 `json:"ingest_events_per_sec"`
	IngestCPU   cpuUse  `json:"ingest_cpu"`
	EndToEnd    float64 `json:"end_to_end_events_per_sec"`
	EndToEndCPU cpuUse  `json:"end_to_end_cpu"`
	Peak        latency `json:"peak_latency"`
}

// cpuMS is the CPU per event of the service and its PostgreSQL backends,
// in milliseconds.
func cpuMS(c cpuUse) float64 { return c.Service + c.Backends }

// runReferenceService measures the reference service's peak ingest and
// end to end on a fresh reference schema: events events from clients
// clients, workers apply workers.
func runReferenceService(ctx context.Context, m *meter, url string, gen *payloads, events, clients, workers int) (serviceRun, error) {
	if err := clearJobs(ctx, url, "reference.webhook_event", "reference.job", "reference.subscription"); err != nil {
		return serviceRun{}, err
	}
	svc, err := startReferenceService(url, workers, clients)
	if err != nil {
		return serviceRun{}, err
	}
	defer svc.stop()
	m.servicePID = svc.cmd.Process.Pid
	defer func() { m.servicePID = 0 }()
	var r serviceRun
	snap := m.snapshot(ctx)
	start := time.Now()
	lat, errs := drive(ctx, svc.url, gen, events, clients, 0)
	r.Ingest = float64(events) / time.Since(start).Seconds()
	r.IngestCPU = m.since(ctx, snap, events)
	r.Peak = percentiles(lat)
	if errs > 0 {
		return r, fmt.Errorf("%d request(s) to the reference service failed", errs)
	}
	last, err := svc.waitSettled(ctx, events)
	if err != nil {
		return r, err
	}
	r.EndToEnd = float64(events) / last.Sub(start).Seconds()
	r.EndToEndCPU = m.since(ctx, snap, events)
	return r, nil
}

// refServiceReport is hookledger's peak beside the reference service's.
type refServiceReport struct {
	Reference  serviceRun `json:"reference"`
	Hookledger serviceRun `json:"hookledger"`
	// Ratios are hookledger's over the reference service's.
	IngestRatio   float64 `json:"ingest_hookledger_to_reference"`
	EndToEndRatio float64 `json:"end_to_end_hookledger_to_reference"`
	// CPU ratios are the reference's CPU per event (service and
	// backends) over hookledger's.
	IngestCPURatio   float64 `json:"ingest_cpu_reference_to_hookledger"`
	EndToEndCPURatio float64 `json:"end_to_end_cpu_reference_to_hookledger"`
}

func (r *refServiceReport) ratios() {
	h, ref := r.Hookledger, r.Reference
	r.IngestRatio, r.EndToEndRatio = h.Ingest/ref.Ingest, h.EndToEnd/ref.EndToEnd
	r.IngestCPURatio = cpuMS(ref.IngestCPU) / cpuMS(h.IngestCPU)
	r.EndToEndCPURatio = cpuMS(ref.EndToEndCPU) / cpuMS(h.EndToEndCPU)
}

func printRefService(w io.Writer, r *refServiceReport) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	row := func(name string, rate float64, c cpuUse) {
		p("%-34s %8.0f   service %.3f  pg backends %.3f  load %.3f ms per event", name, rate, c.Service, c.Backends, c.Load)
	}
	p("the reference design as a service (net/http receiver, one-transaction claim and job, workers one event per transaction):")
	row("reference service ingest", r.Reference.Ingest, r.Reference.IngestCPU)
	row("reference service end-to-end", r.Reference.EndToEnd, r.Reference.EndToEndCPU)
	row("hookledger ingest", r.Hookledger.Ingest, r.Hookledger.IngestCPU)
	row("hookledger end-to-end", r.Hookledger.EndToEnd, r.Hookledger.EndToEndCPU)
	p("ratios hookledger/reference service: ingest %.2fx  end-to-end %.2fx; CPU per event (service + backends) reference/hookledger: ingest %.2fx  end-to-end %.2fx; reference p99 at peak %.1f ms",
		r.IngestRatio, r.EndToEndRatio, r.IngestCPURatio, r.EndToEndCPURatio, r.Reference.Peak.P99)
}
