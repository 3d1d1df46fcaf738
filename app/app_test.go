package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hookledger/hookledger/app"
	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

const secret = "whsec_e2e_secret"

type server struct {
	db   *dbtest.DB
	base string
	// stop shuts the app down (as SIGTERM does) and returns Serve's error.
	stop func() error
}

// requestJobs are the jobs that requests enqueue: all but the periodic
// prune job (RETENTION), which River's leader inserts once it is elected,
// later on a loaded machine, in the middle of a test.
const (
	requestJobs    = `kind NOT IN ('prune_ledger', 'ledger_sweep')`
	requestJobsSQL = `SELECT count(*) FROM river_job WHERE ` + requestJobs
)

// start boots the real app on 127.0.0.1:0 against a fresh database; env
// adds to or overrides the defaults.
func start(t testing.TB, env map[string]string) *server {
	t.Helper()
	return startOn(t, dbtest.New(t), env, config.RoleAll)
}

// startOn boots one process of the given role on db.
func startOn(t testing.TB, db *dbtest.DB, env map[string]string, role config.Role, opts ...app.Option) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return serveOn(t, ln, db, env, role, opts...)
}

// serveOn boots one process of the given role on db, serving ln.
func serveOn(t testing.TB, ln net.Listener, db *dbtest.DB, env map[string]string, role config.Role, opts ...app.Option) *server {
	t.Helper()
	t.Cleanup(func() { ln.Close() }) // Serve closes it; this is for a boot that failed
	vars := map[string]string{
		"DATABASE_URL":          db.URL,
		"STRIPE_WEBHOOK_SECRET": "whsec_other_secret," + secret,
		"LOG_LEVEL":             "warn",
		// Parallel tests share the server's connections: a test's pool, not
		// production's.
		"DB_MAX_CONNS": strconv.Itoa(dbtest.MaxConns),
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.FromEnv(func(k string) string { return vars[k] })
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	log := zap.NewNop() // a fuzz worker outlives its iterations: nothing may log to it
	if tt, ok := t.(*testing.T); ok {
		log = zaptest.NewLogger(tt, zaptest.Level(zap.WarnLevel))
	}
	a, err := app.New(ctx, cfg, log, role, opts...)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	var once sync.Once
	var serveErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			serveErr = <-done
			a.Close()
		})
		return serveErr
	}
	t.Cleanup(func() { require.NoError(t, stop()) })
	return &server{db: db, base: "http://" + ln.Addr().String(), stop: stop}
}

func (s *server) post(t testing.TB, path string, body []byte, header http.Header) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.base+path, bytes.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

func signed(body []byte, at time.Time) http.Header {
	return http.Header{"Stripe-Signature": {provider.SignStripe(secret, at.Unix(), body)}}
}

func subEvent(id, status string, created int64) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"customer.subscription.updated","created":%d,"data":{"object":{"id":"sub_e2e","customer":"cus_e2e","status":%q,"items":{"data":[{"price":{"id":"price_pro"}}]}}}}`, id, created, status))
}

func (s *server) waitSettled(t *testing.T, id string) {
	t.Helper()
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = $1 AND status = 'settled'`, id) == 1
	})
}

func TestEndToEnd(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	body := subEvent("evt_e2e_1", "active", time.Now().Unix())
	code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"status": "claimed", "event_id": "evt_e2e_1"}, out)
	s.waitSettled(t, "evt_e2e_1")

	var status, plan string
	require.NoError(t, s.db.SQL.QueryRow(`SELECT status, plan FROM subscription WHERE external_id = 'sub_e2e'`).Scan(&status, &plan))
	require.Equal(t, "active", status)
	require.Equal(t, "price_pro", plan)

	var secretIndex int
	require.NoError(t, s.db.SQL.QueryRow(`SELECT secret_index FROM webhook_event WHERE event_id = 'evt_e2e_1'`).Scan(&secretIndex))
	require.Equal(t, 1, secretIndex, "the second configured secret matched")

	code, out = s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "duplicate", out["status"])

	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200} {
		resp, err := http.Get(s.base + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, path)
	}
	resp, err := http.Get(s.base + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(metrics), `hookledger_deliveries_total{outcome="claimed",source="stripe"} 1`)
	require.Contains(t, string(metrics), `hookledger_deliveries_total{outcome="duplicate",source="stripe"} 1`)
}

func TestConcurrentDuplicatesClaimOnce(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	body := subEvent("evt_storm", "active", time.Now().Unix())
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		counts = map[string]int{}
	)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
			mu.Lock()
			defer mu.Unlock()
			counts[fmt.Sprintf("%d %v", code, out["status"])]++
		}()
	}
	wg.Wait()
	require.Equal(t, map[string]int{"200 claimed": 1, "200 duplicate": 49}, counts)
	s.waitSettled(t, "evt_storm")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Equal(t, 1, s.db.Count(t, `SELECT attempts FROM webhook_event`))
}

func TestRejectionsWriteNothing(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"MAX_BODY_BYTES": "2048"})
	now := time.Now()
	body := subEvent("evt_bad", "active", now.Unix())
	tampered := bytes.Replace(body, []byte("active"), []byte("paused"), 1)
	noID := []byte(`{"type":"customer.subscription.updated","created":1}`)
	nul := []byte(`{"id":"evt_nul","type":"x","created":1,"note":"a\u0000b"}`)
	lone := []byte(`{"id":"evt_surrogate","type":"x","created":1,"note":"\ud800"}`)
	huge := []byte(`{"id":"evt_big","type":"x","pad":"` + strings.Repeat("a", 2100) + `"}`)
	wrong := http.Header{"Stripe-Signature": {provider.SignStripe("whsec_wrong", now.Unix(), body)}}

	cases := []struct {
		name   string
		path   string
		body   []byte
		header http.Header
		want   int
	}{
		{"tampered body", "/webhooks/stripe", tampered, signed(body, now), 401},
		{"wrong secret", "/webhooks/stripe", body, wrong, 401},
		{"stale timestamp", "/webhooks/stripe", body, signed(body, now.Add(-301*time.Second)), 401},
		{"missing header", "/webhooks/stripe", body, nil, 401},
		{"malformed header", "/webhooks/stripe", body, http.Header{"Stripe-Signature": {"t=x,v1=y"}}, 401},
		{"not JSON", "/webhooks/stripe", []byte("hello"), signed([]byte("hello"), now), 400},
		{"no event id", "/webhooks/stripe", noID, signed(noID, now), 400},
		{"NUL that jsonb refuses", "/webhooks/stripe", nul, signed(nul, now), 400},
		{"lone surrogate that jsonb refuses", "/webhooks/stripe", lone, signed(lone, now), 400},
		{"unknown source", "/webhooks/nope", body, signed(body, now), 404},
		{"disabled source", "/webhooks/github", body, nil, 404},
		{"over the limit", "/webhooks/stripe", huge, signed(huge, now), 413},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := s.post(t, c.path, c.body, c.header)
			require.Equal(t, c.want, code, "%v", out)
			require.NotEmpty(t, out["error"])
		})
	}
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Zero(t, s.db.Count(t, requestJobsSQL))

	resp, err := http.Get(s.base + "/webhooks/stripe")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

func TestBodyLimitWhileReading(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"MAX_BODY_BYTES": "1024"})
	now := time.Now()
	// Exactly the limit is accepted.
	prefix := `{"id":"evt_exact","type":"invoice.paid","created":1,"pad":"`
	exact := []byte(prefix + strings.Repeat("a", 1024-len(prefix)-2) + `"}`)
	require.Len(t, exact, 1024)
	code, out := s.post(t, "/webhooks/stripe", exact, signed(exact, now))
	require.Equal(t, http.StatusOK, code, "%v", out)

	// A body without Content-Length is cut off while reading.
	pr, pw := io.Pipe()
	go func() {
		defer pw.Close()
		for range 64 {
			if _, err := pw.Write(bytes.Repeat([]byte("x"), 1024)); err != nil {
				return
			}
		}
	}()
	req, err := http.NewRequest(http.MethodPost, s.base+"/webhooks/stripe", pr)
	require.NoError(t, err)
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
}

func TestReplayTokenSkipsSignature(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"REPLAY_TOKEN": "replay-secret"})
	body := subEvent("evt_replayed", "active", time.Now().Unix())
	code, _ := s.post(t, "/webhooks/stripe", body, http.Header{"X-Replay-Token": {"guess"}})
	require.Equal(t, http.StatusUnauthorized, code)
	code, out := s.post(t, "/webhooks/stripe", body, http.Header{"X-Replay-Token": {"replay-secret"}})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "claimed", out["status"])
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE replayed AND secret_index IS NULL`))
}

func TestReplayTokenIgnoredWhenUnset(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	body := subEvent("evt_noreplay", "active", time.Now().Unix())
	code, _ := s.post(t, "/webhooks/stripe", body, http.Header{"X-Replay-Token": {""}})
	require.Equal(t, http.StatusUnauthorized, code)
}

func TestUnreachableDatabaseAnswers503(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"CLAIM_TIMEOUT": "300ms"})
	// Hold the ledger's unique key so the claim cannot finish in time.
	tx, err := s.db.SQL.Begin()
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck
	_, err = tx.Exec(`LOCK TABLE webhook_event IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	body := subEvent("evt_locked", "active", time.Now().Unix())
	code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusServiceUnavailable, code, "%v", out)
	require.NoError(t, tx.Rollback())
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
}

// TestGracefulShutdownFinishesInFlight: a delivery whose body is still
// arriving when shutdown starts is answered, and its claim is kept.
func TestGracefulShutdownFinishesInFlight(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	body := subEvent("evt_inflight", "active", time.Now().Unix())
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, s.base+"/webhooks/stripe", pr)
	require.NoError(t, err)
	req.ContentLength = int64(len(body))
	req.Header = signed(body, time.Now())
	type result struct {
		code int
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			res <- result{err: err}
			return
		}
		resp.Body.Close()
		res <- result{code: resp.StatusCode}
	}()
	_, err = pw.Write(body[:len(body)/2])
	require.NoError(t, err)
	// The handler has reserved the body's budget: it is reading the body.
	dbtest.Eventually(t, func() bool {
		return !strings.Contains(s.metrics(t), "hookledger_body_bytes_in_flight 0\n")
	}, "the server never started reading the body")
	stopped := make(chan error, 1)
	go func() { stopped <- s.stop() }()
	// Shutdown has begun once the listener refuses new connections.
	addr := strings.TrimPrefix(s.base, "http://")
	dbtest.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	}, "shutdown never closed the listener")
	_, err = pw.Write(body[len(body)/2:])
	require.NoError(t, err)
	require.NoError(t, pw.Close())

	r := <-res
	require.NoError(t, r.err)
	require.Equal(t, http.StatusOK, r.code)
	require.NoError(t, <-stopped)
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_inflight'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event'`))

	_, err = http.Get(s.base + "/healthz")
	require.Error(t, err, "no longer accepting")
}
