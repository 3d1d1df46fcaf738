package app_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// openUpload opens an unsigned upload to path that declares declared
// bytes of body and sends sent of them, from client (X-Forwarded-For,
// believed from a trusted proxy), and waits until the server has taken it
// in: it holds what its sent bytes reserve (the first chunk doubled until
// they fit, up to the declared length), or it was answered (refused).
// It is closed when the test ends. It reports whether it was answered.
func openUpload(t *testing.T, s *server, path string, declared, sent int, client string) (answered bool) {
	t.Helper()
	before := s.metricValue(t, bodyBytesInFlight)
	c, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { // reads whatever the server answers, until the connection closes
		defer close(done)
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			resp.Body.Close()
		}
	}()
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nX-Forwarded-For: %s\r\n"+
		"X-GitHub-Event: push\r\nX-GitHub-Delivery: upload-%s\r\n\r\n", path, declared, client, client)
	chunk := bytes.Repeat([]byte("a"), 1<<20)
	for left := sent; left > 0; {
		n := min(left, len(chunk))
		if _, err := c.Write(chunk[:n]); err != nil {
			break // refused and closed mid-body
		}
		left -= n
	}
	reserved := 4 << 10
	for reserved < sent {
		reserved = min(declared, 2*reserved)
	}
	dbtest.Eventually(t, func() bool {
		select {
		case <-done:
			answered = true
			return true
		default:
			return s.metricValue(t, bodyBytesInFlight) >= before+float64(reserved)
		}
	}, "upload from %s neither held nor answered", client)
	return answered
}

// TestSlowUploadsToOneSourceDoNotStarveAnother is body-budget starvation
// across sources: five slow unsigned uploads to /webhooks/github, each
// declaring GitHub's 25 MiB from an address of its own, hold the whole
// default budget (24, 24, 4, 2 and 1 MiB sent and a byte more, so that
// each reservation has doubled); signed Stripe deliveries are still
// claimed, ten out of ten.
func TestSlowUploadsToOneSourceDoNotStarveAnother(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	s := start(t, map[string]string{
		"GITHUB_WEBHOOK_SECRET": providerSecrets["github"],
		"TRUSTED_PROXIES":       "127.0.0.1/32",
		"HTTP_READ_TIMEOUT":     "5m",
	})
	refused := 0
	for i, sent := range []int{24 * mib, 24 * mib, 4 * mib, 2 * mib, 1 * mib} {
		if openUpload(t, s, "/webhooks/github", 25*mib, sent+1, fmt.Sprintf("203.0.113.%d", i+1)) {
			refused++
		}
	}
	t.Logf("uploads refused: %d of 5; body bytes in flight: %v", refused, s.metricValue(t, bodyBytesInFlight))

	for i := range 10 {
		s.deliver(t, subEvent(fmt.Sprintf("evt_beside_uploads_%d", i), "active", time.Now().Unix()),
			fmt.Sprintf("198.51.100.%d", i+1), http.StatusOK)
	}
	require.Equal(t, 10, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'stripe'`))
}
