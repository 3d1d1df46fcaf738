package app_test

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/operations/admin"
)

// request makes one request without following redirects, with auth and the
// client address xff (through a trusted proxy) when set.
func (s *server) request(t *testing.T, method, path, xff string, auth func(*http.Request)) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, nil)
	require.NoError(t, err)
	if auth != nil {
		auth(req)
	}
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), resp.Header
}

// TestAdminSurfacesRefuseFraming is clickjacking: another site frames an
// admin page the operator's browser is logged in to. Every admin, console
// and River UI response forbids it, the refusals (401) and redirects
// included.
func TestAdminSurfacesRefuseFraming(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	for _, c := range []struct {
		path string
		auth func(*http.Request)
		want int
	}{
		{"/admin/events", bearer(adminToken), http.StatusOK},
		{"/admin/stats", bearer(adminToken), http.StatusOK},
		{"/admin/csrf", basic(adminToken), http.StatusOK},
		{"/admin/events/evt_none", bearer(adminToken), http.StatusNotFound},
		{"/console/", basic(adminToken), http.StatusOK},
		{"/console/events", basic(adminToken), http.StatusOK},
		{"/console/static/console.css", basic(adminToken), http.StatusOK},
		{"/console", basic(adminToken), http.StatusMovedPermanently},
		{"/riverui/", basic(adminToken), http.StatusOK},
		{"/riverui", basic(adminToken), http.StatusMovedPermanently},
		{"/admin/events", nil, http.StatusUnauthorized},
		{"/admin/stats", bearer("guess"), http.StatusUnauthorized},
		{"/console/", nil, http.StatusUnauthorized},
		{"/console", nil, http.StatusUnauthorized},
		{"/riverui/", basic("guess"), http.StatusUnauthorized},
		{"/riverui", nil, http.StatusUnauthorized},
	} {
		code, _, h := s.request(t, http.MethodGet, c.path, "", c.auth)
		require.Equal(t, c.want, code, c.path)
		require.Equal(t, "DENY", h.Get("X-Frame-Options"), "%s (%d)", c.path, code)
		require.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'", "%s (%d)", c.path, code)
	}
	code, _, h := s.request(t, http.MethodPost, "/admin/events/requeue", "", basic(adminToken))
	require.Equal(t, http.StatusForbidden, code, "a cross-site write")
	require.Equal(t, "DENY", h.Get("X-Frame-Options"))
}

// TestAdminAuthFailuresThrottled is online guessing of ADMIN_TOKEN: past
// admin.ThrottleBurst wrong tokens a client's wrong tokens get 429 with
// Retry-After on the API, the console and River UI alike, while its right
// token is served there. Other clients (told apart through a trusted
// proxy's X-Forwarded-For) are not throttled.
func TestAdminAuthFailuresThrottled(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken, "TRUSTED_PROXIES": "127.0.0.1/32,::1/128"})
	const guesser, operator = "203.0.113.5", "203.0.113.6"
	for i := range admin.ThrottleBurst {
		auth := bearer("guess-" + strconv.Itoa(i))
		if i%2 == 1 {
			auth = basic("guess-" + strconv.Itoa(i))
		}
		code, _, _ := s.request(t, http.MethodGet, "/admin/events", guesser, auth)
		require.Equal(t, http.StatusUnauthorized, code, "guess %d", i+1)
	}
	for _, c := range []struct {
		path string
		auth func(*http.Request)
	}{
		{"/admin/events", bearer("guess-more")},
		{"/admin/stats", bearer("guess-more")},
		{"/console/", basic("guess-more")},
		{"/riverui/", basic("guess-more")},
	} {
		code, body, h := s.request(t, http.MethodGet, c.path, guesser, c.auth)
		require.Equal(t, http.StatusTooManyRequests, code, c.path)
		wait, err := strconv.Atoi(h.Get("Retry-After"))
		require.NoError(t, err, "Retry-After in seconds")
		require.True(t, wait >= 1 && wait <= int(admin.ThrottleEvery/time.Second), "Retry-After %d", wait)
		require.Empty(t, h.Get("WWW-Authenticate"))
		require.Equal(t, "DENY", h.Get("X-Frame-Options"))
		require.NotContains(t, body, "events", "nothing served")
	}
	for _, c := range []struct {
		path string
		auth func(*http.Request)
	}{
		{"/admin/stats", bearer(adminToken)},
		{"/console/", basic(adminToken)},
		{"/riverui/", basic(adminToken)},
	} {
		code, _, _ := s.request(t, http.MethodGet, c.path, guesser, c.auth)
		require.Equal(t, http.StatusOK, code, "%s: the right token is never throttled", c.path)
	}

	code, _, _ := s.request(t, http.MethodGet, "/admin/events", operator, bearer(adminToken))
	require.Equal(t, http.StatusOK, code, "another client is not throttled")
	code, _, _ = s.request(t, http.MethodGet, "/console/", operator, basic(adminToken))
	require.Equal(t, http.StatusOK, code)
	code, _, _ = s.request(t, http.MethodGet, "/admin/events", operator, bearer("typo"))
	require.Equal(t, http.StatusUnauthorized, code, "another client has its own tries")
	code, _, _ = s.request(t, http.MethodGet, "/admin/events", "", bearer(adminToken))
	require.Equal(t, http.StatusOK, code, "the proxy's own address is another client")
	require.Contains(t, s.metrics(t), `hookledger_admin_refusals_total{reason="throttled"} 4`)
}

// TestConsoleShowsOnlyKnownFlashes: the event page's done= names the
// action just done; a link carrying any other text (a phishing message
// shown inside the operator's own console) shows nothing.
func TestConsoleShowsOnlyKnownFlashes(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	now := time.Now()
	body := subEvent("evt_flash", "active", now.Unix())
	code, _ := s.post(t, "/webhooks/stripe", body, signed(body, now))
	require.Equal(t, http.StatusOK, code)

	page := "/console/event?namespace=stripe&id=evt_flash&done="
	lure := "Your session expired. Log in again at https://evil.example/hookledger"
	code, html, _ := s.request(t, http.MethodGet, page+url.QueryEscape(lure), "", basic(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, html, "evil.example")
	require.NotContains(t, html, "Your session expired")
	require.NotContains(t, html, `id="done"`)

	code, html, _ = s.request(t, http.MethodGet, page+"requeued", "", basic(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, html, `<p class="flash" id="done">Requeued: its apply job runs now.</p>`)
	require.Equal(t, 1, strings.Count(html, `id="done"`))
}
