package app_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// TestHostileInput sends what an attacker or a broken client would: every
// case gets a clear 4xx, writes nothing, and the server keeps serving.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{
		"MAX_BODY_BYTES": "65536", "REPLAY_TOKEN": "replay-secret", "ADMIN_TOKEN": adminToken,
		"STANDARD_WEBHOOK_SECRET": providerSecrets["standard"], "SLACK_SIGNING_SECRET": providerSecrets["slack"],
	})
	now := time.Now()
	signedBody := func(b []byte) http.Header { return signed(b, now) }
	deep := func(depth int) []byte {
		return []byte(`{"id":"evt_deep","type":"x","n":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
	}
	invalidUTF8 := []byte("{\"id\":\"evt_utf8\",\"type\":\"x\",\"s\":\"\xff\xfe\"}")
	cases := []struct {
		name   string
		method string
		path   string
		body   []byte
		header http.Header
		want   int
	}{
		{"invalid UTF-8, correctly signed", "POST", "/webhooks/stripe", invalidUTF8, signedBody(invalidUTF8), 400},
		{"nesting past Go's decoder", "POST", "/webhooks/stripe", deep(20000), signedBody(deep(20000)), 400},
		{"not JSON, signed", "POST", "/webhooks/stripe", []byte("<xml/>"), signedBody([]byte("<xml/>")), 400},
		{"empty body, signed", "POST", "/webhooks/stripe", []byte{}, signedBody([]byte{}), 400},
		{"future Slack timestamp", "POST", "/webhooks/slack", []byte(`{"type":"event_callback","event_id":"Ev1"}`),
			slackAt([]byte(`{"type":"event_callback","event_id":"Ev1"}`), now.Add(10*time.Minute)), 401},
		{"stale Stripe timestamp", "POST", "/webhooks/stripe", []byte(`{"id":"evt_s","type":"x"}`), signed([]byte(`{"id":"evt_s","type":"x"}`), now.Add(-time.Hour)), 401},
		{"guessed replay token", "POST", "/webhooks/stripe", []byte(`{"id":"evt_r","type":"x"}`), http.Header{"X-Replay-Token": {"replay-secreT"}}, 401},
		{"replay token prefix", "POST", "/webhooks/stripe", []byte(`{"id":"evt_r","type":"x"}`), http.Header{"X-Replay-Token": {"replay"}}, 401},
		{"guessed admin token", "GET", "/admin/events", nil, http.Header{"Authorization": {"Bearer admin"}}, 401},
		{"path traversal", "POST", "/webhooks/..%2fadmin", nil, nil, 404},
		{"wrong method", "PUT", "/webhooks/stripe", nil, nil, 405},
		{"wrong method on a known path", "DELETE", "/admin/events", nil, nil, 405},
		{"misleading content type", "POST", "/webhooks/stripe", []byte(`{"id":"evt_ct","type":"x"}`), http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(c.method, s.base+c.path, bytes.NewReader(c.body))
			require.NoError(t, err)
			for k, v := range c.header {
				req.Header[k] = v
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, c.want, resp.StatusCode, "%s", body)
		})
	}

	t.Run("huge headers", func(t *testing.T) {
		req, _ := http.NewRequest("POST", s.base+"/webhooks/stripe", strings.NewReader("{}"))
		req.Header.Set("X-Padding", strings.Repeat("a", 200<<10))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	})

	t.Run("declared body over the limit is refused unread", func(t *testing.T) {
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
		require.NoError(t, err)
		defer conn.Close()
		fmt.Fprintf(conn, "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n{")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "answered without waiting for 10 GB")
	})

	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Zero(t, s.db.Count(t, requestJobsSQL))
	resp, err := http.Get(s.base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "still serving")
}

func slackAt(body []byte, at time.Time) http.Header {
	h, _ := provider.Slack.Sign(providerSecrets["slack"], provider.Delivery{At: at, Body: body})
	return h
}

// TestSlowClientsAreCutOff: a client that trickles its headers or its body
// is disconnected by the server's timeouts, and others are served.
func TestSlowClientsAreCutOff(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"HTTP_READ_HEADER_TIMEOUT": "300ms", "HTTP_READ_TIMEOUT": "600ms"})
	addr := strings.TrimPrefix(s.base, "http://")

	slowHeaders, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer slowHeaders.Close()
	fmt.Fprintf(slowHeaders, "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n")
	slowBody, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer slowBody.Close()
	fmt.Fprintf(slowBody, "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nStripe-Signature: t=1,v1=00\r\n\r\n{")

	resp, err := http.Get(s.base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "others are served meanwhile")

	for name, conn := range map[string]net.Conn{"headers": slowHeaders, "body": slowBody} {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
		start := time.Now()
		_, err := io.ReadAll(conn)
		require.NoError(t, err, "%s: the server closed the connection", name)
		require.Less(t, time.Since(start), 4*time.Second, name)
	}
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
}
