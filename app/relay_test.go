package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// relay is a store-and-forward webhook relay in front of hookledger, as
// Hookaido or a queue at the edge is: it keeps each delivery it accepts,
// answers 202 at once, and forwards the delivery to hookledger with its
// body and headers unchanged. It retries on a connection error, 5xx, 408
// and 429, with backoff, and dead-letters on any other answer but a 2xx.
type relay struct {
	url    string // where senders post
	target string // hookledger's base URL
	client *http.Client
	queue  chan *relayed

	mu    sync.Mutex
	items []*relayed // every delivery accepted, in order: the relay's store
}

// relayed is one delivery the relay holds, and what became of it.
type relayed struct {
	path   string
	header http.Header
	body   []byte
	// Only the forwarder that holds the delivery uses these.
	backoff   time.Duration
	notBefore time.Time

	// Under relay.mu:
	attempts int
	codes    []int  // hookledger's answers, 0 for a connection error
	status   string // the JSON status of the final 2xx answer
	done     bool   // forwarded (2xx) or dead-lettered
	dead     bool
}

// newRelay starts a relay that forwards to target with workers
// forwarders, until ctx ends or the test does.
func newRelay(t *testing.T, ctx context.Context, target string, workers int) *relay {
	t.Helper()
	transport := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: workers}
	r := &relay{
		target: target,
		client: &http.Client{Transport: transport, Timeout: 30 * time.Second},
		queue:  make(chan *relayed, 1024),
	}
	srv := httptest.NewServer(http.HandlerFunc(r.accept))
	r.url = srv.URL
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.forward(ctx)
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		srv.Close()
		transport.CloseIdleConnections()
	})
	return r
}

// accept stores a delivery and answers 202 before forwarding it.
func (r *relay) accept(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.enqueue(&relayed{path: req.URL.Path, header: req.Header.Clone(), body: body})
	w.WriteHeader(http.StatusAccepted)
}

func (r *relay) enqueue(d *relayed) {
	r.mu.Lock()
	r.items = append(r.items, d)
	r.mu.Unlock()
	r.queue <- d
}

// redeliver queues a copy of every delivery the relay forwarded, as a
// relay does that replays its store or retries a delivery whose answer it
// lost.
func (r *relay) redeliver() []*relayed {
	var copies []*relayed
	for _, d := range r.all() {
		copies = append(copies, &relayed{path: d.path, header: d.header.Clone(), body: d.body})
	}
	for _, d := range copies {
		r.enqueue(d)
	}
	return copies
}

func (r *relay) forward(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-r.queue:
			r.deliver(ctx, d)
		}
	}
}

// deliver makes one attempt at d, once its backoff has passed, and queues
// it again if it is to be retried: a delivery being retried holds up
// none of the others.
func (r *relay) deliver(ctx context.Context, d *relayed) {
	if wait := time.Until(d.notBefore); wait > 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
	code, status, err := r.send(ctx, d)
	retry := err != nil || code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests
	r.mu.Lock()
	d.attempts++
	d.codes = append(d.codes, code)
	if !retry {
		d.done, d.dead, d.status = true, code >= 300, status
	}
	r.mu.Unlock()
	if retry && ctx.Err() == nil {
		d.backoff = min(max(2*d.backoff, 10*time.Millisecond), 500*time.Millisecond)
		d.notBefore = time.Now().Add(d.backoff)
		r.queue <- d
	}
}

// send makes one attempt; err is a connection error, when no answer came.
func (r *relay) send(ctx context.Context, d *relayed) (code int, status string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.target+d.path, bytes.NewReader(d.body))
	if err != nil {
		return 0, "", err
	}
	req.Header = d.header.Clone()
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out.Status, nil
}

// all returns a snapshot of the deliveries the relay holds.
func (r *relay) all() []relayed {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]relayed, len(r.items))
	for i, d := range r.items {
		out[i] = relayed{path: d.path, header: d.header, body: d.body, attempts: d.attempts,
			codes: append([]int(nil), d.codes...), status: d.status, done: d.done, dead: d.dead}
	}
	return out
}

// drained reports whether every delivery is forwarded or dead-lettered.
func (r *relay) drained() bool {
	for _, d := range r.all() {
		if !d.done {
			return false
		}
	}
	return true
}

// relayEvents are n Stripe events, each about a subscription of its own,
// with the headers Stripe sends them with, signed at signedAt.
func relayEvents(prefix string, n int, signedAt time.Time) (ids []string, bodies [][]byte, headers []http.Header) {
	for i := range n {
		id := fmt.Sprintf("evt_%s_%d", prefix, i)
		body := bytes.Replace(subEvent(id, "active", signedAt.Unix()), []byte(`"sub_e2e"`), []byte(`"sub_`+id+`"`), 1)
		h := signed(body, signedAt)
		h.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
		h.Set("Content-Type", "application/json; charset=utf-8")
		ids, bodies, headers = append(ids, id), append(bodies, body), append(headers, h)
	}
	return ids, bodies, headers
}

// post sends a delivery to the relay, as the sender does.
func (r *relay) post(t *testing.T, ctx context.Context, path string, body []byte, header http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header = header.Clone()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
}

// reserveAddr returns an address on which nothing listens: a connection
// to it is refused until a listener takes it again.
func reserveAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// listenOn listens on addr again, which another process may hold for a
// moment (a freed port is up for grabs).
func listenOn(t *testing.T, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	dbtest.Eventually(t, func() bool {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err == nil
	}, "could not listen on %s again", addr)
	return ln
}

// relayTimeout bounds each relay test: its relay gives up retrying then.
const relayTimeout = 2*dbtest.Patience + time.Minute

// outage is how long hookledger was unreachable while the relay held the
// deliveries: longer than Stripe's 300 s tolerance, shorter than 900 s.
const outage = 10 * time.Minute

// TestRelayAfterOutageIsStale: deliveries that a relay held through a
// 10-minute outage carry Stripe signatures older than the default
// tolerance: each is refused 401 as stale, the relay dead-letters it
// without retrying, and the refusals are counted by reason.
func TestRelayAfterOutageIsStale(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
	defer cancel()
	addr := reserveAddr(t)
	rl := newRelay(t, ctx, "http://"+addr, 4)

	const n = 10
	ids, bodies, headers := relayEvents("stale", n, time.Now().Add(-outage))
	for i := range ids {
		rl.post(t, ctx, "/webhooks/stripe", bodies[i], headers[i])
	}
	s := serveOn(t, listenOn(t, addr), dbtest.New(t), nil, config.RoleAll)
	dbtest.Eventually(t, rl.drained, "the relay never drained")

	for _, d := range rl.all() {
		require.True(t, d.dead, "dead-lettered")
		// The first attempts may have found hookledger still down.
		require.Equal(t, http.StatusUnauthorized, d.codes[len(d.codes)-1])
		require.NotContains(t, d.codes[:len(d.codes)-1], http.StatusUnauthorized, "a 401 is never retried")
	}
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Zero(t, s.db.Count(t, requestJobsSQL))
	require.Contains(t, s.metrics(t), fmt.Sprintf(`hookledger_signature_failures_total{reason="stale",source="stripe"} %d`+"\n", n))
}

// TestRelayAfterOutageWithinTolerance: a source whose tolerance covers the
// outage takes every held delivery once; the sender's own retry of an
// event and the relay's redelivery of its whole store are answered
// duplicate, and each event is one ledger row, applied once.
func TestRelayAfterOutageWithinTolerance(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
	defer cancel()
	path := t.TempDir() + "/hookledger.yaml"
	require.NoError(t, os.WriteFile(path, []byte(`
sources:
  - name: stripe-relayed
    provider: stripe
    secrets_env: STRIPE_WEBHOOK_SECRET
    tolerance: 900s
`), 0o600))
	addr := reserveAddr(t)
	rl := newRelay(t, ctx, "http://"+addr, 4)

	const n = 10
	ids, bodies, headers := relayEvents("held", n, time.Now().Add(-outage))
	for i := range ids {
		rl.post(t, ctx, "/webhooks/stripe-relayed", bodies[i], headers[i])
	}
	// Stripe retried the first event during the outage: the relay holds
	// it twice.
	rl.post(t, ctx, "/webhooks/stripe-relayed", bodies[0], headers[0])

	s := serveOn(t, listenOn(t, addr), dbtest.New(t), map[string]string{"HOOKLEDGER_CONFIG": path}, config.RoleAll)
	dbtest.Eventually(t, rl.drained, "the relay never drained")
	answers := map[string]int{}
	for _, d := range rl.all() {
		require.False(t, d.dead, "%v", d.codes)
		require.Equal(t, http.StatusOK, d.codes[len(d.codes)-1])
		answers[d.status]++
	}
	require.Equal(t, map[string]int{"claimed": n, "duplicate": 1}, answers)
	for _, id := range ids {
		s.waitSettled(t, id)
	}

	copies := rl.redeliver()
	dbtest.Eventually(t, rl.drained, "the relay never drained its redelivery")
	all := rl.all()
	for _, d := range all[len(all)-len(copies):] {
		require.Equal(t, []int{http.StatusOK}, d.codes)
		require.Equal(t, "duplicate", d.status)
	}

	require.Equal(t, n, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE source = 'stripe-relayed' AND status = 'settled' AND attempts = 1`))
	require.Equal(t, n, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Equal(t, n, s.db.Count(t, `SELECT count(*) FROM subscription`))
	require.Equal(t, n, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE headers->>'User-Agent' = 'Stripe/1.0 (+https://stripe.com/docs/webhooks)'`),
		"the relay passed the sender's headers through")
	require.Contains(t, s.metrics(t), fmt.Sprintf(`hookledger_deliveries_total{outcome="claimed",source="stripe-relayed"} %d`+"\n", n))
}

// TestRelayRetriesUntilHookledgerIsUp: while hookledger is down the relay's
// connections are refused, and while its database cannot take a claim it
// answers 503; the relay retries both, and once hookledger is back every
// delivery is claimed exactly once.
func TestRelayRetriesUntilHookledgerIsUp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
	defer cancel()
	addr := reserveAddr(t)
	rl := newRelay(t, ctx, "http://"+addr, 4)

	const n = 10
	ids, bodies, headers := relayEvents("down", n, time.Now())
	for i := range ids {
		rl.post(t, ctx, "/webhooks/stripe", bodies[i], headers[i])
	}
	dbtest.Eventually(t, func() bool {
		for _, d := range rl.all() {
			if d.attempts < 2 {
				return false
			}
		}
		return true
	}, "the relay never retried every delivery")
	for _, d := range rl.all() {
		require.False(t, d.done)
		require.Equal(t, 0, d.codes[0], "connection refused")
	}

	// hookledger comes up, but its ledger is locked: the claims time out.
	db := dbtest.New(t)
	tx, err := db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck
	_, err = tx.Exec(`LOCK TABLE webhook_event IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	s := serveOn(t, listenOn(t, addr), db, map[string]string{"CLAIM_TIMEOUT": "300ms"}, config.RoleAll)
	dbtest.Eventually(t, func() bool {
		for _, d := range rl.all() {
			for _, code := range d.codes {
				if code == http.StatusServiceUnavailable {
					return true
				}
			}
		}
		return false
	}, "hookledger never answered 503")
	require.NoError(t, tx.Rollback())

	dbtest.Eventually(t, rl.drained, "the relay never drained")
	for _, d := range rl.all() {
		require.False(t, d.dead, "%v", d.codes)
		require.Equal(t, http.StatusOK, d.codes[len(d.codes)-1], "%v", d.codes)
		require.Contains(t, []string{"claimed", "duplicate"}, d.status)
	}
	for _, id := range ids {
		s.waitSettled(t, id)
	}
	require.Equal(t, n, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE attempts = 1`))
	require.Equal(t, n, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Contains(t, s.metrics(t), `hookledger_deliveries_total{outcome="unavailable",source="stripe"}`, "the 503s are counted")
}
