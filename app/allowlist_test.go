package app_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// fakePublishers serves a Stripe ips_webhooks.json and a GitHub /meta.
func fakePublishers(t *testing.T, stripeIPs, githubHooks string) (stripeURL, githubURL string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/files/ips/ips_webhooks.json":
			fmt.Fprintf(w, `{"WEBHOOKS":[%s]}`, stripeIPs)
		case "/meta":
			fmt.Fprintf(w, `{"verifiable_password_authentication":false,"hooks":[%s],"web":["1.1.1.0/24"]}`, githubHooks)
		default:
			http.Error(w, "down", http.StatusBadGateway)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/files/ips/ips_webhooks.json", srv.URL + "/meta"
}

func TestIPsUpdateWritesTheListsOrNothing(t *testing.T) {
	t.Parallel()
	stripeURL, githubURL := fakePublishers(t, `"3.18.12.63","54.187.216.72"`, `"192.30.252.0/22","2a0a:a440::/29"`)
	file := filepath.Join(t.TempDir(), "ips.json")
	code, stdout, stderr := run("ips", "update", "--file", file, "--stripe-url", stripeURL, "--github-url", githubURL)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "stripe: 2 networks")
	p, err := provider.LoadPublishedIPs(file)
	require.NoError(t, err)
	require.Equal(t, []string{"3.18.12.63/32", "54.187.216.72/32"}, p.Lists["stripe"].Prefixes)
	require.Equal(t, []string{"192.30.252.0/22", "2a0a:a440::/29"}, p.Lists["github"].Prefixes)
	require.WithinDuration(t, time.Now(), p.Lists["github"].FetchedAt, time.Hour)

	before, err := os.ReadFile(file)
	require.NoError(t, err)
	code, _, stderr = run("ips", "update", "--file", file, "--stripe-url", stripeURL, "--github-url", githubURL+"-gone")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "left unchanged")
	after, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, before, after)

	code, _, _ = run("ips", "update", "--stripe-url", stripeURL)
	require.Equal(t, 2, code, "no file: a usage error")
}

// TestAllowIPsRefusesBeforeTheBody: a source's allow_ips answers 403 to a
// client outside it before reading the body, and writes nothing; a
// forged X-Forwarded-For is believed only from TRUSTED_PROXIES, and only
// its hop next to the trusted proxy counts.
func TestAllowIPsRefusesBeforeTheBody(t *testing.T) {
	t.Parallel()
	stripeURL, githubURL := fakePublishers(t, `"198.51.100.7"`, `"192.30.252.0/22"`)
	ips := filepath.Join(t.TempDir(), "ips.json")
	code, _, stderr := run("ips", "update", "--file", ips, "--stripe-url", stripeURL, "--github-url", githubURL)
	require.Equal(t, 0, code, stderr)
	cfg := filepath.Join(t.TempDir(), "hookledger.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`
sources:
  - name: stripe-locked
    provider: stripe
    namespace: stripe-locked
    secrets: [whsec_locked]
    allow_ips: [stripe, 10.1.0.0/16]
  - name: stripe-loopback
    provider: stripe
    namespace: stripe-loopback
    secrets: [whsec_loopback]
    allow_ips: [127.0.0.0/8, "::1"]
`), 0o600))

	send := func(s *server, source, secret, id, xff string, body []byte) int {
		t.Helper()
		if body == nil {
			body = subEvent(id, "active", time.Now().Unix())
		}
		h, err := provider.Stripe.Sign(secret, provider.Delivery{Body: body})
		require.NoError(t, err)
		if xff != "" {
			h.Set("X-Forwarded-For", xff)
		}
		code, _ := s.post(t, "/webhooks/"+source, body, h)
		return code
	}

	direct := start(t, map[string]string{"HOOKLEDGER_CONFIG": cfg, "PUBLISHED_IPS_FILE": ips})
	require.Equal(t, http.StatusOK, send(direct, "stripe-loopback", "whsec_loopback", "evt_al_1", "", nil))
	require.Equal(t, http.StatusForbidden, send(direct, "stripe-locked", "whsec_locked", "evt_al_2", "", nil))
	require.Equal(t, http.StatusForbidden, send(direct, "stripe-locked", "whsec_locked", "evt_al_3", "198.51.100.7", nil),
		"X-Forwarded-For from an untrusted peer is ignored")
	require.Equal(t, 1, direct.db.Count(t, `SELECT count(*) FROM webhook_event`))

	metrics := direct.metricsText(t)
	require.Contains(t, metrics, `hookledger_allowlist_refusals_total{source="stripe-locked"} 2`)
	require.Contains(t, metrics, `hookledger_published_ips_stale{list="stripe"} 0`)

	// Refused before the body is read: a body far over the limit gets 403, not 413.
	req, err := http.NewRequest(http.MethodPost, direct.base+"/webhooks/stripe-locked", io.LimitReader(zeros{}, 64<<20))
	require.NoError(t, err)
	req.ContentLength = 64 << 20
	resp, err := http.DefaultClient.Do(req)
	if err == nil { // the server may close the connection before the client has sent it all
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
	}

	proxied := start(t, map[string]string{"HOOKLEDGER_CONFIG": cfg, "PUBLISHED_IPS_FILE": ips, "TRUSTED_PROXIES": "127.0.0.1/32,::1/128"})
	require.Equal(t, http.StatusOK, send(proxied, "stripe-locked", "whsec_locked", "evt_al_4", "198.51.100.7", nil), "a published Stripe address through the proxy")
	require.Equal(t, http.StatusOK, send(proxied, "stripe-locked", "whsec_locked", "evt_al_5", "10.1.2.3", nil), "a configured CIDR")
	require.Equal(t, http.StatusForbidden, send(proxied, "stripe-locked", "whsec_locked", "evt_al_6", "198.51.100.7, 203.0.113.9", nil),
		"the client forged the left hop; the proxy saw 203.0.113.9")
	require.Equal(t, http.StatusForbidden, send(proxied, "stripe-loopback", "whsec_loopback", "evt_al_7", "203.0.113.9", nil),
		"behind a trusted proxy the proxy's own address is not the client's")
	require.Equal(t, 2, proxied.db.Count(t, `SELECT count(*) FROM webhook_event`))
}

// TestStalePublishedListIsReported: the shipped copy, older than
// PUBLISHED_IPS_MAX_AGE, is enforced and reported by the metric.
func TestStalePublishedListIsReported(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "hookledger.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`
sources:
  - name: github-locked
    provider: github
    namespace: github-locked
    secrets: [gh_secret]
    allow_ips: [github]
`), 0o600))
	s := start(t, map[string]string{"HOOKLEDGER_CONFIG": cfg, "PUBLISHED_IPS_MAX_AGE": "1s"})
	metrics := s.metricsText(t)
	require.Contains(t, metrics, `hookledger_published_ips_stale{list="github"} 1`)
	code, _ := s.post(t, "/webhooks/github-locked", []byte(`{}`), http.Header{})
	require.Equal(t, http.StatusForbidden, code, "a stale list is still enforced")
}

func (s *server) metricsText(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(raw)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
