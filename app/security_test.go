package app_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// metricValue reads one sample of /metrics, 0 when absent.
func (s *server) metricValue(t *testing.T, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(s.metrics(t))
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

// TestOne401BodyForEveryReason: a client learns nothing about why its
// signature was refused; the reason is counted by kind.
func TestOne401BodyForEveryReason(t *testing.T) {
	s := start(t, nil)
	now := time.Now()
	body := subEvent("evt_401", "active", now.Unix())
	cases := map[string]http.Header{
		"missing":   nil,
		"malformed": {"Stripe-Signature": {"t=soon,v1=00"}},
		"mismatch":  signed([]byte(`{"other":"body"}`), now),
		"stale":     signed(body, now.Add(-time.Hour)),
	}
	var bodies []string
	for reason, h := range cases {
		req, err := http.NewRequest(http.MethodPost, s.base+"/webhooks/stripe", strings.NewReader(string(body)))
		require.NoError(t, err)
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, reason)
		bodies = append(bodies, string(b))
		require.Equal(t, 1.0, s.metricValue(t, `hookledger_signature_failures_total{reason="`+reason+`",source="stripe"}`), reason)
	}
	for _, b := range bodies {
		require.Equal(t, bodies[0], b, "every 401 has the same body")
		require.NotContains(t, b, "tolerance")
		require.NotContains(t, b, "timestamp")
	}
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// rss is the process's resident set, from /proc (0 where there is none).
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseUint(string(m[1]), 10, 64)
	return n << 10
}

// TestBodyBudgetBoundsMemory is the amplification attack: 300 connections
// declare a 1 MiB body and send nothing. The server reserves body bytes
// against its budget before reading, never allocates from the declared
// length, and answers those that do not fit 503 with Retry-After; its
// memory does not follow the declarations.
func TestBodyBudgetBoundsMemory(t *testing.T) {
	const (
		conns    = 300
		declared = 1 << 20
		budget   = 16 << 20 // 16 bodies of 1 MiB
	)
	s := start(t, map[string]string{"MAX_INFLIGHT_BODY_BYTES": strconv.Itoa(budget), "HTTP_READ_TIMEOUT": "5m"})
	addr := strings.TrimPrefix(s.base, "http://")
	heapBefore, rssBefore := heapInUse(), rss()

	var refused, retryAfter atomic.Int64
	open := make([]net.Conn, 0, conns)
	for range conns {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		open = append(open, c)
		fmt.Fprintf(c, "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nStripe-Signature: t=1,v1=00\r\n\r\n", declared)
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return // closed by the test: a held reservation
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				refused.Add(1)
				if resp.Header.Get("Retry-After") != "" {
					retryAfter.Add(1)
				}
			}
		}()
	}
	held := budget / declared
	require.Eventually(t, func() bool {
		return refused.Load() == conns-int64(held) &&
			s.metricValue(t, "hookledger_body_bytes_in_flight") == budget
	}, 30*time.Second, 20*time.Millisecond, "refused %d", refused.Load())
	require.Equal(t, refused.Load(), retryAfter.Load(), "every 503 says when to retry")

	heapAfter, rssAfter := heapInUse(), rss()
	t.Logf("%d connections declaring %d bytes: heap in use %d -> %d MiB, RSS %d -> %d MiB",
		conns, declared, heapBefore>>20, heapAfter>>20, rssBefore>>20, rssAfter>>20)
	// Allocating the declared lengths would take 300 MiB; what is held is
	// connection state only.
	require.Less(t, int64(heapAfter)-int64(heapBefore), int64(48<<20))

	for _, c := range open {
		c.Close()
	}
	require.Eventually(t, func() bool { return s.metricValue(t, "hookledger_body_bytes_in_flight") == 0 },
		30*time.Second, 20*time.Millisecond, "reservations are released")
	body := subEvent("evt_after_budget", "active", time.Now().Unix())
	code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event`), "only the genuine delivery")
}
