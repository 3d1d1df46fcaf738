package app_test

import (
	"bufio"
	"context"
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
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hookledger/hookledger/app"
	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
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
	t.Parallel()
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
// against its budget as they arrive, never from the declared length: each
// holds a first chunk of 4 KiB until it is answered (408 once the minimum
// data rate's grace is over), none is refused for want of budget, its
// memory does not follow the declarations, and a genuine delivery is
// claimed meanwhile.
func TestBodyBudgetBoundsMemory(t *testing.T) {
	// Serial: it measures this process's heap, which parallel tests share.
	const (
		conns      = 300
		declared   = 1 << 20
		budget     = 16 << 20 // 16 bodies of 1 MiB
		firstChunk = 4 << 10
	)
	s := start(t, map[string]string{"MAX_INFLIGHT_BODY_BYTES": strconv.Itoa(budget), "HTTP_READ_TIMEOUT": "5m"})
	addr := strings.TrimPrefix(s.base, "http://")
	heapBefore, rssBefore := heapInUse(), rss()

	var answered, refused atomic.Int64
	open := make([]net.Conn, 0, conns)
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	for range conns {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		open = append(open, c)
		fmt.Fprintf(c, "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nStripe-Signature: t=1,v1=00\r\n\r\n", declared)
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return // closed by the test
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				refused.Add(1)
			}
			answered.Add(1)
		}()
	}
	dbtest.Eventually(t, func() bool {
		return s.metricValue(t, "hookledger_body_bytes_in_flight") == float64((conns-answered.Load())*firstChunk)
	}, "in flight %v, answered %d", s.metricValue(t, "hookledger_body_bytes_in_flight"), answered.Load())
	require.Zero(t, refused.Load(), "together they hold at most %d bytes", conns*firstChunk)

	heapAfter, rssAfter := heapInUse(), rss()
	t.Logf("%d connections declaring %d bytes: heap in use %d -> %d MiB, RSS %d -> %d MiB",
		conns, declared, heapBefore>>20, heapAfter>>20, rssBefore>>20, rssAfter>>20)
	// Allocating the declared lengths would take 300 MiB; what is held is
	// connection state only.
	require.Less(t, int64(heapAfter)-int64(heapBefore), int64(48<<20))

	body := subEvent("evt_after_budget", "active", time.Now().Unix())
	code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code, "%v", out)

	for _, c := range open {
		c.Close()
	}
	dbtest.Eventually(t, func() bool { return s.metricValue(t, "hookledger_body_bytes_in_flight") == 0 }, "reservations are released")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event`), "only the genuine delivery")
}

// TestUntrustedIdentityRefused: ids and types are sender input (GitHub's
// and Shopify's headers are not even signed): over 255 bytes, with control
// characters, or read from a body key that jsonb would read differently,
// they get 400 and nothing is written.
func TestUntrustedIdentityRefused(t *testing.T) {
	t.Parallel()
	s := allProviders(t)
	push, err := os.ReadFile("../testdata/providers/github/push.default.json")
	require.NoError(t, err)
	github := func(id, event string) http.Header {
		return http.Header{
			"X-Hub-Signature-256": {provider.SignGitHub(providerSecrets["github"], push)},
			"X-Github-Delivery":   {id}, "X-Github-Event": {event},
		}
	}
	stripe := func(body string) ([]byte, http.Header) {
		h, _ := provider.Stripe.Sign(providerSecrets["stripe"], provider.Delivery{Body: []byte(body)})
		return []byte(body), h
	}
	cases := map[string]func() (string, []byte, http.Header){
		"4,000-byte GitHub delivery id": func() (string, []byte, http.Header) {
			return "/webhooks/github", push, github(strings.Repeat("a", 4000), "push")
		},
		"256-byte GitHub event name": func() (string, []byte, http.Header) {
			return "/webhooks/github", push, github("d-1", strings.Repeat("e", 256))
		},
		"control character in the event name": func() (string, []byte, http.Header) {
			return "/webhooks/github", push, github("d-2", "push\tpull_request")
		},
		"300-byte Stripe id": func() (string, []byte, http.Header) {
			b, h := stripe(`{"id":"` + strings.Repeat("x", 300) + `","type":"invoice.paid","created":1}`)
			return "/webhooks/stripe", b, h
		},
		"Stripe id and a case variant": func() (string, []byte, http.Header) {
			b, h := stripe(`{"id":"evt_a","type":"invoice.paid","created":1,"ID":"evt_b"}`)
			return "/webhooks/stripe", b, h
		},
		"Stripe type twice": func() (string, []byte, http.Header) {
			b, h := stripe(`{"id":"evt_c","type":"invoice.paid","created":1,"type":"charge.refunded"}`)
			return "/webhooks/stripe", b, h
		},
		"Stripe id only as a case variant": func() (string, []byte, http.Header) {
			b, h := stripe(`{"Id":"evt_d","type":"invoice.paid","created":1}`)
			return "/webhooks/stripe", b, h
		},
		"Slack event type twice": func() (string, []byte, http.Header) {
			body := []byte(`{"type":"event_callback","event_id":"Ev9","event":{"type":"app_mention","Type":"message"}}`)
			h, _ := provider.Slack.Sign(providerSecrets["slack"], provider.Delivery{Body: body})
			return "/webhooks/slack", body, h
		},
	}
	for name, c := range cases {
		path, body, h := c()
		code, out := s.post(t, path, body, h)
		require.Equal(t, http.StatusBadRequest, code, "%s: %v", name, out)
		require.NotEmpty(t, out["error"], name)
	}
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Zero(t, s.db.Count(t, requestJobsSQL))

	b, h := stripe(`{"id":"evt_fine","type":"invoice.paid","created":1,"data":{"object":{"ID":"x","id":"y"}}}`)
	code, out := s.post(t, "/webhooks/stripe", b, h)
	require.Equal(t, http.StatusOK, code, "keys below the envelope are the handler's business: %v", out)
}

// TestReplayTokenScopedToReplayableSources: the replay token skips
// verification only where hookledger has a replay path (Stripe, Paddle,
// GitHub); on Slack, Shopify and Standard Webhooks an unsigned delivery
// with the token is a 401. A config-file source honours its own token.
func TestReplayTokenScopedToReplayableSources(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/hookledger.yaml"
	require.NoError(t, os.WriteFile(path, []byte(`
sources:
  - name: stripe-eu
    provider: stripe
    namespace: stripe-eu
    secrets_env: EU_SECRET
    replay_token_env: EU_REPLAY_TOKEN
`), 0o600))
	s := start(t, map[string]string{
		"REPLAY_TOKEN": "replay-secret", "HOOKLEDGER_CONFIG": path, "EU_SECRET": "whsec_eu", "EU_REPLAY_TOKEN": "eu-token",
		"SLACK_SIGNING_SECRET": providerSecrets["slack"], "SHOPIFY_WEBHOOK_SECRET": providerSecrets["shopify"],
		"STANDARD_WEBHOOK_SECRET": providerSecrets["standard"],
	})
	token := http.Header{"X-Replay-Token": {"replay-secret"}}
	for path, body := range map[string]string{
		"/webhooks/slack":    `{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention"}}`,
		"/webhooks/shopify":  `{"id":1}`,
		"/webhooks/standard": `{"type":"usage.recorded","timestamp":"2026-01-01T00:00:00Z","data":{}}`,
	} {
		h := token.Clone()
		h.Set("X-Shopify-Topic", "orders/create")
		h.Set("X-Shopify-Event-Id", "e1")
		h.Set("Webhook-Id", "msg_1")
		code, _ := s.post(t, path, []byte(body), h)
		require.Equal(t, http.StatusUnauthorized, code, path)
	}
	body := subEvent("evt_replay_ok", "active", time.Now().Unix())
	code, out := s.post(t, "/webhooks/stripe", body, token)
	require.Equal(t, http.StatusOK, code, "%v", out)

	code, _ = s.post(t, "/webhooks/stripe-eu", body, token)
	require.Equal(t, http.StatusUnauthorized, code, "a source with its own token ignores the shared one")
	code, out = s.post(t, "/webhooks/stripe-eu", body, http.Header{"X-Replay-Token": {"eu-token"}})
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE replayed`))
}

// TestFutureVersionsRefused: an event that says it happened more than a
// day from now would pin its business row at that version; it is refused
// at intake whether it is signed or replayed, and the row keeps taking
// genuine events.
func TestFutureVersionsRefused(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"REPLAY_TOKEN": "replay-secret"})
	now := time.Now()
	pin := subEvent("evt_pin", "canceled", 9223372036854775807)
	code, out := s.post(t, "/webhooks/stripe", pin, http.Header{"X-Replay-Token": {"replay-secret"}})
	require.Equal(t, http.StatusBadRequest, code, "%v", out)
	tomorrow := subEvent("evt_tomorrow", "canceled", now.Add(48*time.Hour).Unix())
	code, out = s.post(t, "/webhooks/stripe", tomorrow, signed(tomorrow, now))
	require.Equal(t, http.StatusBadRequest, code, "%v", out)
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))

	genuine := subEvent("evt_genuine", "active", now.Unix())
	code, _ = s.post(t, "/webhooks/stripe", genuine, signed(genuine, now))
	require.Equal(t, http.StatusOK, code)
	s.waitSettled(t, "evt_genuine")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE external_id = 'sub_e2e' AND status = 'active'`))
}

// TestCrossSiteAdminWritesRefused is the CSRF attack: a page on another
// site makes the operator's browser (holding cached basic credentials)
// force-requeue usage events and delete a River job. Both get 403 and
// nothing changes; the same requests from the same origin, with the CSRF
// token, or with the bearer token go through.
func TestCrossSiteAdminWritesRefused(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken, "STANDARD_WEBHOOK_SECRET": providerSecrets["standard"]})
	body := []byte(`{"type":"usage.recorded","timestamp":"2026-01-01T00:00:00Z","data":{"customer_id":"cus_csrf","metric":"api_calls","quantity":100}}`)
	code, _ := s.post(t, "/webhooks/standard", body, standardSigned(t, "msg_csrf", body))
	require.Equal(t, http.StatusOK, code)
	s.waitSettled(t, "msg_csrf")
	total := func() int {
		return s.db.Count(t, `SELECT coalesce(sum(quantity), 0) FROM usage_total WHERE customer_id = 'cus_csrf'`)
	}
	jobs := func() int { return s.db.Count(t, requestJobsSQL) }
	require.Equal(t, 100, total())
	jobsBefore := jobs()
	var jobID int64
	require.NoError(t, s.db.SQL.QueryRow(`SELECT id FROM river_job WHERE `+requestJobs+` ORDER BY id LIMIT 1`).Scan(&jobID))

	send := func(method, path, contentType, payload string, h http.Header) int {
		req, err := http.NewRequest(method, s.base+path, strings.NewReader(payload))
		require.NoError(t, err)
		req.SetBasicAuth("ops", adminToken)
		req.Header.Set("Content-Type", contentType)
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	crossSite := []http.Header{
		{"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}},
		{"Origin": {"https://evil.example"}},
		{"Sec-Fetch-Site": {"same-site"}},
		{"Origin": {"null"}},
		{}, // no proof at all
		{"X-Csrf-Token": {"guess"}},
	}
	for _, h := range crossSite {
		require.Equal(t, http.StatusForbidden,
			send("POST", "/admin/events/requeue?status=settled&force=true", "application/x-www-form-urlencoded", "a=1", h), "%v", h)
		require.Equal(t, http.StatusForbidden,
			send("POST", "/riverui/api/jobs/delete", "text/plain", fmt.Sprintf(`{"job_ids":[%d]}`, jobID), h), "%v", h)
		require.Equal(t, http.StatusForbidden, send("DELETE", "/riverui/api/jobs", "text/plain", "", h), "%v", h)
	}
	require.Equal(t, 100, total(), "no force-requeue ran")
	require.Equal(t, jobsBefore, jobs(), "no job was deleted or added")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled' AND attempts = 1`))
	require.Contains(t, s.metrics(t), `hookledger_admin_refusals_total{reason="cross_site"} 18`)

	// Reads stay open to basic auth; writes pass with proof of origin.
	require.Equal(t, http.StatusOK, send("GET", "/admin/stats", "", "", http.Header{"Sec-Fetch-Site": {"cross-site"}}))
	host := strings.TrimPrefix(s.base, "http://")
	require.Equal(t, http.StatusOK, send("POST", "/admin/events/requeue?status=failed", "", "", http.Header{"Origin": {"http://" + host}}))
	require.Equal(t, http.StatusOK, send("POST", "/admin/events/requeue?status=failed", "", "", http.Header{"Sec-Fetch-Site": {"same-origin"}}))
	code, out, _ := s.admin(t, "GET", "/admin/csrf", basic(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, http.StatusOK, send("POST", "/admin/events/requeue?status=failed", "", "",
		http.Header{"X-Csrf-Token": {out["csrf_token"].(string)}}))
	code, _, _ = s.admin(t, "POST", "/admin/events/requeue?status=failed", bearer(adminToken))
	require.Equal(t, http.StatusOK, code, "the bearer token always works")
}

// TestMetricsOnTheirOwnListener: with METRICS_ADDR, /metrics (source
// names, volumes) and the schema version leave the public port; with
// METRICS_TOKEN, scrapes need the token.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	cfg, err := config.FromEnv(func(k string) string {
		return map[string]string{
			"DATABASE_URL": db.URL, "STRIPE_WEBHOOK_SECRET": secret, "LOG_LEVEL": "warn", "DB_MAX_CONNS": strconv.Itoa(dbtest.MaxConns),
			"METRICS_ADDR": "127.0.0.1:0", "METRICS_TOKEN": "scrape-token",
		}[k]
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), config.RoleAll)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done); a.Close() })
	public, private := "http://"+ln.Addr().String(), "http://"+a.MetricsAddr()

	get := func(url, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, _ := get(public+"/metrics", "scrape-token")
	require.Equal(t, http.StatusNotFound, code, "not on the public port")
	code, body := get(public+"/readyz", "")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "version")
	code, _ = get(private+"/metrics", "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body = get(private+"/metrics", "scrape-token")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "hookledger_body_bytes_in_flight")
	code, body = get(private+"/readyz", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "version")
	code, _ = get(private+"/webhooks/stripe", "")
	require.Equal(t, http.StatusNotFound, code, "webhooks are not on the metrics listener")
}

// TestHashFallbackKeepsDistinctEventsApart: events that differ only in a
// large integer, or in null against absent, are two events under a
// hash_fields fallback, and a retry is still one.
func TestHashFallbackKeepsDistinctEventsApart(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/hookledger.yaml"
	require.NoError(t, os.WriteFile(path, []byte(`
sources:
  - name: legacy
    provider: slack
    namespace: legacy
    secrets: [legacy_secret]
    id:
      hash_fields: [team_id, event.seq]
`), 0o600))
	s := start(t, map[string]string{"HOOKLEDGER_CONFIG": path})
	post := func(body string) string {
		h, _ := provider.Slack.Sign("legacy_secret", provider.Delivery{Body: []byte(body)})
		code, out := s.post(t, "/webhooks/legacy", []byte(body), h)
		require.Equal(t, http.StatusOK, code, "%v", out)
		return out["status"].(string)
	}
	ev := func(seq string) string {
		return `{"type":"event_callback","team_id":"T1","event":{"type":"message"` + seq + `}}`
	}
	require.Equal(t, "claimed", post(ev(`,"seq":9007199254740992`)))
	require.Equal(t, "claimed", post(ev(`,"seq":9007199254740993`)), "2^53+1 is not 2^53")
	require.Equal(t, "claimed", post(ev(`,"seq":null`)))
	require.Equal(t, "claimed", post(ev(``)), "absent is not null")
	require.Equal(t, "duplicate", post(ev(`,"seq":9007199254740993`)), "a retry is the same event")
	require.Equal(t, 4, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'legacy'`))
}

// TestReplayedBodyUnderNewIDIsDuplicate is the captured-delivery attack on
// providers that sign only the body: one genuine GitHub delivery re-sent
// with new GUIDs under its event name, in any case (sequentially and all
// at once), without the secret, claims nothing more. The event name and
// Shopify's topic keep events with one body apart (TestBodyDigest*); a
// source may turn the check off.
func TestReplayedBodyUnderNewIDIsDuplicate(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/hookledger.yaml"
	require.NoError(t, os.WriteFile(path, []byte(`
sources:
  - name: github-nodedup
    provider: github
    namespace: github-nodedup
    secrets: [nodedup_secret]
    body_dedup: false
`), 0o600))
	s := start(t, map[string]string{
		"HOOKLEDGER_CONFIG":      path,
		"GITHUB_WEBHOOK_SECRET":  providerSecrets["github"],
		"SHOPIFY_WEBHOOK_SECRET": providerSecrets["shopify"],
	})
	push, err := os.ReadFile("../testdata/providers/github/push.default.json")
	require.NoError(t, err)
	captured := http.Header{"X-Hub-Signature-256": {provider.SignGitHub(providerSecrets["github"], push)}}
	delivery := func(id, event string) http.Header {
		h := captured.Clone()
		h.Set("X-Github-Delivery", id)
		h.Set("X-Github-Event", event)
		return h
	}
	code, out := s.post(t, "/webhooks/github", push, delivery("guid-genuine", "push"))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "claimed", out["status"])
	for i, event := range []string{"push", "push", "PUSH", "Push", "push"} {
		code, out := s.post(t, "/webhooks/github", push, delivery(fmt.Sprintf("guid-forged-%d", i), event))
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "duplicate", out["status"], "forged id %d", i)
	}
	results := make(chan string, 20)
	for i := range 20 {
		go func() {
			_, out := s.post(t, "/webhooks/github", push, delivery(fmt.Sprintf("guid-storm-%d", i), "push"))
			status, _ := out["status"].(string)
			results <- status
		}()
	}
	for range 20 {
		require.Equal(t, "duplicate", <-results, "concurrent forged ids, batched or not")
	}
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'github'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE body_digest IS NOT NULL`))
	code, out = s.post(t, "/webhooks/github", push, delivery("guid-genuine", "push"))
	require.Equal(t, "duplicate", out["status"], "a genuine redelivery is still a duplicate")

	// Shopify: one payload to products/create and products/update is two
	// events; the same body under the same topic and a new id is a replay.
	product, err := os.ReadFile("../testdata/providers/shopify/products.update.shopify-dev-example.json")
	require.NoError(t, err)
	shopify := func(id, topic string) string {
		h := http.Header{
			"X-Shopify-Hmac-Sha256": {provider.SignShopify(providerSecrets["shopify"], product)},
			"X-Shopify-Event-Id":    {id}, "X-Shopify-Topic": {topic},
		}
		code, out := s.post(t, "/webhooks/shopify", product, h)
		require.Equal(t, http.StatusOK, code, "%v", out)
		return out["status"].(string)
	}
	require.Equal(t, "claimed", shopify("ev-create", "products/create"))
	require.Equal(t, "claimed", shopify("ev-update", "products/update"))
	require.Equal(t, "duplicate", shopify("ev-forged", "products/update"))
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'shopify'`))

	// Turned off, each id is its own event (as before the check).
	signedOff := http.Header{"X-Hub-Signature-256": {provider.SignGitHub("nodedup_secret", push)}, "X-Github-Event": {"push"}}
	for _, id := range []string{"a", "b"} {
		h := signedOff.Clone()
		h.Set("X-Github-Delivery", id)
		code, out := s.post(t, "/webhooks/github-nodedup", push, h)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "claimed", out["status"])
	}
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'github-nodedup' AND body_digest IS NOT NULL`))
}

// TestLogOnlyBodyReplayEnqueuesNothing: under CLAIM_MODE=log-only a
// duplicate is applied again, but a body replay under a forged id has no
// row of its own, so nothing is enqueued for it; a genuine redelivery is
// applied again as log-only promises.
func TestLogOnlyBodyReplayEnqueuesNothing(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"CLAIM_MODE": "log-only", "GITHUB_WEBHOOK_SECRET": providerSecrets["github"]})
	push, err := os.ReadFile("../testdata/providers/github/push.default.json")
	require.NoError(t, err)
	post := func(id string) string {
		h := http.Header{
			"X-Hub-Signature-256": {provider.SignGitHub(providerSecrets["github"], push)},
			"X-Github-Delivery":   {id}, "X-Github-Event": {"push"},
		}
		_, out := s.post(t, "/webhooks/github", push, h)
		return out["status"].(string)
	}
	require.Equal(t, "claimed", post("guid-1"))
	require.Equal(t, "duplicate", post("guid-forged"))
	require.Equal(t, 1, s.db.Count(t, requestJobsSQL))
	s.waitSettled(t, "guid-1") // log-only applies a duplicate again once it was applied
	require.Equal(t, "duplicate", post("guid-1"))
	require.Equal(t, 2, s.db.Count(t, requestJobsSQL), "the genuine redelivery is applied again")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
}
