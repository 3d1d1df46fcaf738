package app_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

const bodyBytesInFlight = "hookledger_body_bytes_in_flight"

// slowConn is a delivery that declares a body and sends only part of it,
// unsigned; answered receives its response (nil when the connection
// closes without one).
type slowConn struct {
	net.Conn
	answered chan *http.Response
}

// openSlow opens a connection that declares declared bytes of body and
// sends the first sent of them, from client (X-Forwarded-For, believed
// from a trusted proxy; none when empty). It is closed when the test ends.
func openSlow(t *testing.T, s *server, declared, sent int, client string) *slowConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	require.NoError(t, err)
	sc := &slowConn{Conn: c, answered: make(chan *http.Response, 1)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			sc.answered <- nil
			return
		}
		resp.Body.Close()
		sc.answered <- resp
	}()
	t.Cleanup(func() {
		c.Close()
		wg.Wait()
	})
	xff := ""
	if client != "" {
		xff = "X-Forwarded-For: " + client + "\r\n"
	}
	fmt.Fprintf(c, "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n", declared, xff)
	_, err = c.Write([]byte(strings.Repeat("{", sent)))
	require.NoError(t, err)
	return sc
}

// openRefused opens a slow connection that must be answered 503 with
// Retry-After, holding nothing of the budget.
func openRefused(t *testing.T, s *server, declared int, client string) {
	t.Helper()
	before := s.metricValue(t, bodyBytesInFlight)
	sc := openSlow(t, s, declared, 0, client)
	dbtest.Eventually(t, func() bool {
		return len(sc.answered) > 0 || s.metricValue(t, bodyBytesInFlight) != before
	}, "never answered")
	select {
	case resp := <-sc.answered:
		require.NotNil(t, resp, "answered before the connection closed")
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
	default:
		t.Fatalf("held %v bytes of the budget instead of being refused", s.metricValue(t, bodyBytesInFlight)-before)
	}
}

// largeEvent is a Stripe event of size bytes.
func largeEvent(t *testing.T, id string, size int) []byte {
	t.Helper()
	prefix := fmt.Sprintf(`{"id":%q,"object":"event","type":"invoice.paid","created":%d,"pad":"`, id, time.Now().Unix())
	b := []byte(prefix + strings.Repeat("a", size-len(prefix)-2) + `"}`)
	require.Len(t, b, size)
	return b
}

// deliver posts body signed, from client (none when empty), and requires
// the answer want.
func (s *server) deliver(t *testing.T, body []byte, client string, want int) {
	t.Helper()
	h := signed(body, time.Now())
	if client != "" {
		h.Set("X-Forwarded-For", client)
	}
	code, out := s.post(t, "/webhooks/stripe", body, h)
	require.Equal(t, want, code, "%v", out)
	if want == http.StatusOK {
		require.Equal(t, "claimed", out["status"])
	}
}

// TestSlowBodiesDoNotStarveDeliveries is the budget starvation attack:
// 70 unsigned connections each declare a 1 MiB body, together more than
// the whole 64 MiB budget, and send one byte of it. A body reserves its
// bytes as they arrive, so they hold almost nothing, and genuine
// deliveries, small and large, are claimed while they wait.
func TestSlowBodiesDoNotStarveDeliveries(t *testing.T) {
	t.Parallel()
	const conns = 70
	s := start(t, map[string]string{"HTTP_READ_TIMEOUT": "5m"})
	for i := range conns {
		before := s.metricValue(t, bodyBytesInFlight)
		sc := openSlow(t, s, 1<<20, 1, "")
		// The server has taken it in: it holds some budget, or it was answered.
		dbtest.Eventually(t, func() bool {
			return s.metricValue(t, bodyBytesInFlight) != before || len(sc.answered) > 0
		}, "slow connection %d never reached the receiver", i)
	}

	s.deliver(t, subEvent("evt_during_slow_bodies", "active", time.Now().Unix()), "", http.StatusOK)
	s.deliver(t, largeEvent(t, "evt_large_during_slow_bodies", 900<<10), "", http.StatusOK)
	require.LessOrEqual(t, s.metricValue(t, bodyBytesInFlight), float64(conns*4<<10),
		"each slow connection holds at most a first chunk")
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event`), "only the genuine deliveries")
}

// TestClientShareOfBodyBudget: one client address holds at most a quarter
// of the budget. Its connections past that get 503 with Retry-After, and
// other addresses are served meanwhile. Large bodies that fill the open
// part of the budget leave the slice kept for small ones, so a small
// delivery is still claimed; once small bodies fill that too every address
// gets 503 with Retry-After; once the bodies are gone, all are served
// again.
func TestClientShareOfBodyBudget(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	s := start(t, map[string]string{
		"MAX_INFLIGHT_BODY_BYTES": strconv.Itoa(8 * mib), // 2 MiB a client, 1 MiB kept for small bodies
		"TRUSTED_PROXIES":         "127.0.0.1/32",
		"HTTP_READ_TIMEOUT":       "5m",
	})
	const attacker = "203.0.113.7"
	held := []*slowConn{
		openSlow(t, s, mib, 600<<10, attacker),
		openSlow(t, s, mib, 600<<10, attacker),
	}
	dbtest.Eventually(t, func() bool { return s.metricValue(t, bodyBytesInFlight) == 2*mib },
		"in flight %v", s.metricValue(t, bodyBytesInFlight))
	for range 10 {
		openRefused(t, s, mib, attacker)
	}
	s.deliver(t, subEvent("evt_attacker_address", "active", time.Now().Unix()), attacker, http.StatusServiceUnavailable)
	require.Equal(t, float64(2*mib), s.metricValue(t, bodyBytesInFlight), "the share holds")

	s.deliver(t, largeEvent(t, "evt_other_address", 900<<10), "198.51.100.9", http.StatusOK)
	s.deliver(t, largeEvent(t, "evt_direct", 900<<10), "", http.StatusOK)

	// Large bodies from more addresses fill the open 7 MiB: large ones
	// wait, small ones are served.
	for _, client := range []string{"192.0.2.1", "192.0.2.2"} {
		held = append(held, openSlow(t, s, mib, 600<<10, client), openSlow(t, s, mib, 600<<10, client))
	}
	held = append(held, openSlow(t, s, mib, 600<<10, "192.0.2.3"))
	dbtest.Eventually(t, func() bool { return s.metricValue(t, bodyBytesInFlight) == 7*mib },
		"in flight %v", s.metricValue(t, bodyBytesInFlight))
	openRefused(t, s, mib, "192.0.2.9")
	s.deliver(t, subEvent("evt_small_beside_large", "active", time.Now().Unix()), "192.0.2.9", http.StatusOK)

	// Small bodies fill their slice (16 of 64 KiB, 40 KiB arrived each):
	// everyone waits.
	for range 16 {
		held = append(held, openSlow(t, s, 64<<10, 40<<10, "192.0.2.4"))
	}
	dbtest.Eventually(t, func() bool { return s.metricValue(t, bodyBytesInFlight) == 8*mib },
		"in flight %v", s.metricValue(t, bodyBytesInFlight))
	openRefused(t, s, 1000, "192.0.2.9")
	s.deliver(t, subEvent("evt_budget_full", "active", time.Now().Unix()), "192.0.2.9", http.StatusServiceUnavailable)

	for _, sc := range held {
		sc.Close()
	}
	dbtest.Eventually(t, func() bool { return s.metricValue(t, bodyBytesInFlight) == 0 }, "released")
	s.deliver(t, subEvent("evt_attacker_address", "active", time.Now().Unix()), attacker, http.StatusOK)
	require.Equal(t, 4, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
}
