package app_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/stripemock"
)

// fakeStripeAPI serves n subscription events on GET /v1/events.
func fakeStripeAPI(t *testing.T, n int) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, _, _ := r.BasicAuth(); u != "sk_test_replay" {
			http.Error(w, "unauthorized", 401)
			return
		}
		var data []json.RawMessage
		for i := n - 1; i >= 0; i-- {
			data = append(data, subEvent(fmt.Sprintf("evt_replay_%d", i), "active", time.Now().Unix()-int64(60*i)))
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "has_more": false})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestReplayCommandTargetMode(t *testing.T) {
	s := start(t, map[string]string{"REPLAY_TOKEN": "replay-token"})
	api := fakeStripeAPI(t, 3)
	t.Setenv("STRIPE_API_BASE", api.URL)
	t.Setenv("STRIPE_API_KEY", "sk_test_replay")
	t.Setenv("REPLAY_TOKEN", "replay-token")
	t.Setenv("DATABASE_URL", "")

	body := subEvent("evt_replay_1", "active", time.Now().Unix())
	code, _ := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code, "one of the three was delivered before the outage")

	code, stdout, stderr := run("replay", "stripe", "--since", "2h", "--target", s.base+"/webhooks/stripe")
	require.Equal(t, 0, code, stderr)
	require.JSONEq(t, `{"fetched":3,"new":2,"duplicate":1,"failed":0}`, lastLine(stdout))
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE replayed`))

	t.Setenv("REPLAY_TOKEN", "wrong")
	code, stdout, _ = run("replay", "stripe", "--since", "2h", "--target", s.base+"/webhooks/stripe")
	require.Equal(t, 1, code, "a receiver that refuses the token fails the run")
	require.JSONEq(t, `{"fetched":3,"new":0,"duplicate":0,"failed":3}`, lastLine(stdout))
}

func TestReplayCommandDirectMode(t *testing.T) {
	s := start(t, nil)
	api := fakeStripeAPI(t, 4)
	t.Setenv("STRIPE_API_BASE", api.URL)
	t.Setenv("STRIPE_API_KEY", "sk_test_replay")
	t.Setenv("DATABASE_URL", s.db.URL)

	code, stdout, stderr := run("replay", "stripe", "--since", fmt.Sprint(time.Now().Add(-time.Hour).Unix()))
	require.Equal(t, 0, code, stderr)
	require.JSONEq(t, `{"fetched":4,"new":4,"duplicate":0,"failed":0}`, lastLine(stdout))
	code, stdout, _ = run("replay", "stripe", "--since", time.Now().Add(-time.Hour).Format(time.RFC3339))
	require.Equal(t, 0, code)
	require.JSONEq(t, `{"fetched":4,"new":0,"duplicate":4,"failed":0}`, lastLine(stdout))
	for i := range 4 {
		s.waitSettled(t, fmt.Sprintf("evt_replay_%d", i))
	}

	for _, args := range [][]string{
		{"replay"}, {"replay", "stripe"}, {"replay", "stripe", "--since", "soon"}, {"replay", "bitbucket", "--since", "1h"},
		{"replay", "github", "--since", "1h"},
	} {
		code, _, _ := run(args...)
		require.Equal(t, 2, code, "%v", args)
	}
}

// TestReplayAgainstStripeMock runs replay against Stripe's official mock
// server, which rejects any parameter the real API would reject. `go tool
// task test` installs it and sets STRIPE_MOCK.
func TestReplayAgainstStripeMock(t *testing.T) {
	base := stripemock.Start(t)

	s := start(t, nil)
	t.Setenv("STRIPE_API_BASE", base)
	t.Setenv("STRIPE_API_KEY", stripemock.Key)
	t.Setenv("DATABASE_URL", s.db.URL)
	code, stdout, stderr := run("replay", "stripe", "--since", "2h", "--until", "1h",
		"--types", "customer.subscription.updated,invoice.paid", "--failed-only")
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", stdout, stderr)
	var stats map[string]int
	require.NoError(t, json.Unmarshal([]byte(lastLine(stdout)), &stats))
	require.Equal(t, map[string]int{"fetched": 1, "new": 1, "duplicate": 0, "failed": 0}, stats, "the mock's one event, claimed")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE replayed`))
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestReplayThinCommand: replay stripe --thin pages Stripe's v2 events
// API and claims its thin events as replayed rows; a second run finds them
// duplicates; --failed-only, which v2 cannot filter by, is a usage error.
func TestReplayThinCommand(t *testing.T) {
	s := start(t, nil)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk_test_replay" || r.URL.Path != "/v2/core/events" {
			http.Error(w, `{"error":{"type":"invalid_request_error"}}`, http.StatusUnauthorized)
			return
		}
		var data []map[string]any
		for i := range 2 {
			data = append(data, map[string]any{
				"id": fmt.Sprintf("evt_thin_replay_%d", i), "object": "v2.core.event", "type": "v1.customer.subscription.updated",
				"created": time.Now().Add(-time.Duration(i+1) * time.Minute).UTC().Format(time.RFC3339), "livemode": false,
				"related_object": map[string]any{"id": fmt.Sprintf("sub_thin_%d", i), "type": "subscription", "url": fmt.Sprintf("/v1/subscriptions/sub_thin_%d", i)},
			})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data, "next_page_url": nil, "previous_page_url": nil})
	}))
	t.Cleanup(api.Close)
	t.Setenv("STRIPE_API_BASE", api.URL)
	t.Setenv("STRIPE_API_KEY", "sk_test_replay")
	t.Setenv("DATABASE_URL", s.db.URL)

	code, stdout, stderr := run("replay", "stripe", "--thin", "--since", "1h")
	require.Equal(t, 0, code, stderr)
	require.JSONEq(t, `{"fetched":2,"new":2,"duplicate":0,"failed":0}`, lastLine(stdout))
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE replayed AND event_id LIKE 'evt_thin_replay_%'`))
	code, stdout, _ = run("replay", "stripe", "--thin", "--since", "1h")
	require.Equal(t, 0, code)
	require.JSONEq(t, `{"fetched":2,"new":0,"duplicate":2,"failed":0}`, lastLine(stdout))
	code, _, _ = run("replay", "stripe", "--thin", "--failed-only", "--since", "1h")
	require.Equal(t, 2, code)
}
