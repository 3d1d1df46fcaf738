package receiver

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/intake"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/core/provider"
)

func init() { gin.SetMode(gin.ReleaseMode) }

const testSecret = "whsec_receiver_test"

// claimAll claims every delivery.
type claimAll struct{}

func (claimAll) Claim(context.Context, ledger.Claim) (ledger.ClaimResult, error) {
	return ledger.Claimed, nil
}

// testServer serves the webhook endpoint of one Stripe source; the client
// address is X-Forwarded-For when the peer is loopback.
type testServer struct {
	h    *handler
	addr string
}

func serve(t *testing.T, cfg Config) *testServer {
	t.Helper()
	e := gin.New()
	e.RemoteIPHeaders = []string{"X-Forwarded-For"}
	require.NoError(t, e.SetTrustedProxies([]string{"127.0.0.1/32"}))
	cfg.Sources = []Source{{
		Source:    intake.Source{Name: "stripe", Namespace: "stripe", Provider: provider.Stripe},
		Secrets:   [][]byte{[]byte(testSecret)},
		Tolerance: -1,
	}}
	cfg.Claimer = claimAll{}
	cfg.Metrics = metrics.New()
	cfg.ClaimTimeout = 10 * time.Second
	h := newHandler(cfg)
	e.POST("/webhooks/:source", h.receive)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &testServer{h: h, addr: srv.Listener.Addr().String()}
}

// inFlight is the budget in use.
func (s *testServer) inFlight() int64 {
	b := s.h.body.budget
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inUse()
}

// waitInFlight waits until the budget in use is want.
func (s *testServer) waitInFlight(t *testing.T, want int64) {
	t.Helper()
	eventually(t, func() bool { return s.inFlight() == want }, "budget in use %d, want %d", s.inFlight(), want)
}

// eventually polls cond for at most a minute: a bound, not a measurement.
func eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf(msg, args...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// event is a Stripe event of exactly size bytes.
func event(t *testing.T, id string, size int) []byte {
	t.Helper()
	prefix := fmt.Sprintf(`{"id":%q,"object":"event","type":"invoice.paid","created":%d,"pad":"`, id, time.Now().Unix())
	b := []byte(prefix + strings.Repeat("a", size-len(prefix)-2) + `"}`)
	require.Len(t, b, size)
	return b
}

// post sends a signed delivery from client (X-Forwarded-For; none when
// empty); chunked hides its length.
func (s *testServer) post(t *testing.T, body []byte, client string, chunked bool) *http.Response {
	t.Helper()
	var r io.Reader = bytes.NewReader(body)
	if chunked {
		r = io.MultiReader(r)
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/webhooks/stripe", r)
	require.NoError(t, err)
	req.Header.Set("Stripe-Signature", provider.SignStripe(testSecret, time.Now().Unix(), body))
	if client != "" {
		req.Header.Set("X-Forwarded-For", client)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// start opens a connection that declares a body of declared bytes (chunked
// when negative) from client and sends the first sent of them; it is closed
// when the test ends.
func (s *testServer) start(t *testing.T, declared, sent int, client string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	length := fmt.Sprintf("Content-Length: %d", declared)
	if declared < 0 {
		length = "Transfer-Encoding: chunked"
	}
	fmt.Fprintf(c, "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n%s\r\nX-Forwarded-For: %s\r\nStripe-Signature: t=1,v1=00\r\n\r\n", length, client)
	if sent > 0 {
		body := bytes.Repeat([]byte("a"), sent)
		if declared < 0 {
			body = append(fmt.Appendf(nil, "%x\r\n", sent), append(body, "\r\n"...)...)
		}
		_, err = c.Write(body)
		require.NoError(t, err)
	}
	return c
}

// answer reads the response on c; the deadline only bounds a broken test.
func answer(t *testing.T, c net.Conn) *http.Response {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Minute)))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the server closes the connection")
	return resp
}

// TestBudgetFollowsArrivedBytes: a delivery reserves a first chunk (its
// declared length when smaller), then twice its buffer each time a byte
// past it arrives, up to the declared length; never the declaration up
// front. Closing the connection releases it all.
func TestBudgetFollowsArrivedBytes(t *testing.T) {
	t.Parallel()
	s := serve(t, Config{MaxBodyBytes: 1 << 20, BodyBudget: 64 << 20, bodyGrace: time.Hour})
	cases := []struct {
		declared, sent int
		held           int64
	}{
		{1 << 20, 0, firstChunk},
		{1 << 20, 1, firstChunk},
		{1 << 20, firstChunk, firstChunk},
		{1 << 20, firstChunk + 1, 2 * firstChunk},
		{1 << 20, 300 << 10, 512 << 10},
		{1 << 20, 600 << 10, 1 << 20},
		{1 << 20, 1<<20 - 1, 1 << 20},
		{1000, 0, 1000},
		{900 << 10, 600 << 10, 900 << 10},
		{-1, 0, firstChunk},
		{-1, 5000, 2 * firstChunk},
	}
	for _, c := range cases {
		conn := s.start(t, c.declared, c.sent, "203.0.113.7")
		s.waitInFlight(t, c.held)
		conn.Close()
		s.waitInFlight(t, 0)
	}
}

// TestClientShareAndBudget: one client address holds at most a quarter of
// the budget (at least one body of the limit), and an IPv6 client its /64;
// past its share, or past the budget, a delivery gets 503 with
// Retry-After before its body is read, while other clients are served.
// Large bodies that fill the open part of the budget leave the slice kept
// for small ones: a small delivery is still served, until small bodies
// fill that too.
func TestClientShareAndBudget(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	s := serve(t, Config{MaxBodyBytes: mib, BodyBudget: 8 * mib, bodyGrace: time.Hour}) // 2 MiB a client, 1 MiB for small bodies
	refused := func(declared int, client string) {
		t.Helper()
		resp := answer(t, s.start(t, declared, 0, client))
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, client)
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
	}

	// One client: two bodies of 1 MiB in flight (600 KiB arrived each).
	s.start(t, mib, 600<<10, "203.0.113.7")
	s.start(t, mib, 600<<10, "203.0.113.7")
	s.waitInFlight(t, 2*mib)
	refused(mib, "203.0.113.7")
	require.Equal(t, http.StatusOK, s.post(t, event(t, "evt_other_client", 900<<10), "198.51.100.9", false).StatusCode)

	// IPv6: the /64 is one client.
	s.start(t, mib, 600<<10, "2001:db8:0:1::a")
	s.start(t, mib, 600<<10, "2001:db8:0:1::b")
	s.waitInFlight(t, 4*mib)
	refused(mib, "2001:db8:0:1::c")
	require.Equal(t, http.StatusOK, s.post(t, event(t, "evt_other_prefix", 900<<10), "2001:db8:0:2::a", false).StatusCode)

	// Large bodies fill the open 7 MiB: large ones wait, small ones do not.
	s.start(t, mib, 600<<10, "192.0.2.1")
	s.start(t, mib, 600<<10, "192.0.2.1")
	s.start(t, mib, 600<<10, "192.0.2.2")
	s.waitInFlight(t, 7*mib)
	refused(mib, "192.0.2.3")
	require.Equal(t, http.StatusOK, s.post(t, event(t, "evt_small_beside_large", 2000), "192.0.2.3", false).StatusCode)

	// Small bodies fill their slice (64 KiB each, 40 KiB arrived): now
	// everyone waits.
	for range 16 { // 16 x 64 KiB: the small slice
		s.start(t, 64<<10, 40<<10, "192.0.2.4")
	}
	s.waitInFlight(t, 8*mib)
	require.Equal(t, http.StatusServiceUnavailable, s.post(t, event(t, "evt_small_budget_full", 2000), "192.0.2.5", false).StatusCode)
	refused(mib, "192.0.2.5")
	require.Equal(t, 8*mib, int(s.inFlight()), "never past the budget")
}

// TestSlowBodyCutOff: a body that arrives slower than the minimum rate
// after the grace period gets 408 and its connection is closed; what it
// held is released.
func TestSlowBodyCutOff(t *testing.T) {
	t.Parallel()
	s := serve(t, Config{MaxBodyBytes: 1 << 20, BodyBudget: 64 << 20, bodyGrace: 50 * time.Millisecond, bodyMinRate: 1 << 10})
	for _, declared := range []int{1 << 20, -1} {
		resp := answer(t, s.start(t, declared, 10, "203.0.113.7"))
		require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
		s.waitInFlight(t, 0)
	}
}

// TestBodyLimitKept: a body of exactly the limit is accepted even when the
// budget is the limit; one byte more gets 413, and a declared length over
// the limit is refused without reading a byte.
func TestBodyLimitKept(t *testing.T) {
	t.Parallel()
	s := serve(t, Config{MaxBodyBytes: 1024, BodyBudget: 1024, bodyGrace: time.Hour})
	require.Equal(t, http.StatusOK, s.post(t, event(t, "evt_exact", 1024), "", false).StatusCode)
	require.Equal(t, http.StatusOK, s.post(t, event(t, "evt_exact_chunked", 1024), "", true).StatusCode)
	require.Equal(t, http.StatusRequestEntityTooLarge, s.post(t, event(t, "evt_over", 1025), "", true).StatusCode)
	resp := answer(t, s.start(t, 1<<30, 0, "203.0.113.7"))
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "answered without a byte of the body")
	s.waitInFlight(t, 0)
}

func TestClientKey(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.7":          "203.0.113.7",
		"::ffff:203.0.113.7":   "203.0.113.7",
		"2001:db8:0:1::a":      "2001:db8:0:1::/64",
		"2001:db8:0:1:ffff::b": "2001:db8:0:1::/64",
		"fe80::1%eth0":         "fe80::/64",
		"not an address":       "not an address",
	} {
		require.Equal(t, want, clientKey(in), in)
	}
}

// TestBudgetShares: how the budget is divided, and that each part holds.
func TestBudgetShares(t *testing.T) {
	const mib = 1 << 20
	two := []budgetSource{{name: "stripe", limit: mib}, {name: "github", limit: 4 * mib}}
	b := newBudget(16*mib, two, nil)
	require.Equal(t, int64(4*mib), b.perClient, "a quarter")
	require.Equal(t, [pools]int64{14 * mib, 2 * mib, 0}, b.size, "an eighth for small bodies; no allow_ips, no trusted slice")
	require.Equal(t, int64(mib), b.smallPerSource, "the small slice shared out")
	require.Equal(t, map[string]int64{"stripe": 7 * mib, "github": 7 * mib}, b.openPerSource, "half the rest each")
	require.Equal(t, int64(mib), newBudget(2*mib, two[:1], nil).perClient, "never below the limit")
	require.Equal(t, int64(mib), newBudget(0, two[:1], nil).size[poolOpen], "no budget: the limit")
	require.Equal(t, int64(14*mib), newBudget(16*mib, two[:1], nil).openPerSource["stripe"], "a lone source holds the whole rest")
	tight := newBudget(4*mib, two, nil)
	require.Equal(t, [pools]int64{4 * mib, 0, 0}, tight.size, "the rest always holds one body of the largest limit")
	require.Equal(t, int64(4*mib), tight.openPerSource["github"], "and so does a source's share")
	trusted := newBudget(16*mib, []budgetSource{{name: "stripe", limit: mib, trusted: true}, {name: "github", limit: mib}}, nil)
	require.Equal(t, [pools]int64{12 * mib, 2 * mib, 2 * mib}, trusted.size, "an eighth kept for allow_ips clients")

	newHold := func(b *budget, client, source string, small, trusted bool) *hold {
		return &hold{budget: b, client: client, source: source, small: small, trusted: trusted}
	}
	require.NoError(t, newHold(b, "empty", "stripe", false, false).grow(0))
	require.Empty(t, b.byClient, "an empty body is no client's")

	// GitHub's large bodies take its half of the open part, no more.
	var github []*hold
	for _, c := range []string{"a", "b"} {
		h := newHold(b, c, "github", false, false)
		require.NoError(t, h.grow(7*mib/2))
		github = append(github, h)
	}
	require.ErrorIs(t, newHold(b, "c", "github", false, false).grow(1), errSourceOverBudget)
	require.NoError(t, newHold(b, "c", "github", true, false).grow(64<<10), "its small bodies have its part of the small slice")
	require.ErrorIs(t, github[0].grow(mib), errClientOverBudget)
	stripe := newHold(b, "d", "stripe", false, false)
	require.NoError(t, stripe.grow(4*mib), "Stripe has its own half")
	require.NoError(t, newHold(b, "e", "stripe", false, false).grow(3*mib))
	require.ErrorIs(t, newHold(b, "f", "stripe", false, false).grow(1), errOverBudget, "the open part is full")
	small := newHold(b, "f", "stripe", true, false)
	require.NoError(t, small.grow(mib), "Stripe's small bodies have their part of the small slice")
	require.ErrorIs(t, newHold(b, "g", "stripe", true, false).grow(1), errOverBudget)
	for _, h := range append(github, stripe, small) {
		h.release()
	}

	// allow_ips clients are served first: the trusted slice, then the rest.
	h := newHold(trusted, "stripe-ip", "stripe", false, true)
	require.NoError(t, h.grow(2*mib))
	require.Equal(t, int64(2*mib), trusted.used[poolTrusted])
	require.NoError(t, h.grow(mib))
	require.Equal(t, int64(mib), trusted.used[poolOpen])
	h.release()
	require.Zero(t, trusted.inUse())
	require.Empty(t, trusted.byClient)
	require.Empty(t, trusted.bySource[poolOpen])
}

// TestMinimumRate: the next byte is due grace plus what arrived at the
// minimum rate after the start.
func TestMinimumRate(t *testing.T) {
	require.Equal(t, 5*time.Second, due(0, 5*time.Second, 1024))
	require.Equal(t, 6*time.Second, due(1024, 5*time.Second, 1024))
	require.Equal(t, 5*time.Second+1024*time.Second, due(1<<20, 5*time.Second, 1024))
	require.Equal(t, 5*time.Second+32*1024*time.Second, due(32<<20, 5*time.Second, 1024), "no overflow at the largest limit")
}
