package app_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/app"
	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/operations/admin"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// postForm posts form to path with header, not following redirects.
func (s *server) postForm(t *testing.T, path string, form url.Values, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.base+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// withCookie authenticates a request by the session cookie alone.
func withCookie(c *http.Cookie) func(*http.Request) {
	return func(r *http.Request) { r.AddCookie(c) }
}

// TestConsoleLogin: POST /console/login with the token sets a session
// cookie (HttpOnly, SameSite=Strict, bounded) with which the console,
// River UI and River UI's API answer 200, and without which they answer
// 401; a wrong token or another site's form sets none; a POST under the
// cookie needs the console's CSRF proof; logout clears it.
func TestConsoleLogin(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})

	code, body, _ := s.page(t, "/console/login", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<form method="post" action="/console/login"`)
	require.Contains(t, body, `name="token" type="password"`)
	require.NotContains(t, body, admin.CSRFToken(adminToken), "the login page holds no CSRF token")
	require.NotContains(t, body, "/console/static/", "the login page asks for nothing behind the token")

	resp := s.postForm(t, "/console/login", url.Values{"token": {"guess"}}, nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Empty(t, resp.Cookies())
	resp = s.postForm(t, "/console/login", url.Values{"token": {adminToken}}, http.Header{"Origin": {"https://evil.example"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Empty(t, resp.Cookies())

	resp = s.postForm(t, "/console/login", url.Values{"token": {adminToken}, "next": {"https://evil.example/"}}, http.Header{"Sec-Fetch-Site": {"same-origin"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/", resp.Header.Get("Location"), "never to another site")
	require.Len(t, resp.Cookies(), 1)
	cookie := resp.Cookies()[0]
	require.Equal(t, "hookledger_session", cookie.Name)
	require.True(t, cookie.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	require.False(t, cookie.Secure, "plain HTTP")
	require.Equal(t, 12*3600, cookie.MaxAge)
	resp = s.postForm(t, "/console/login", url.Values{"token": {adminToken}, "next": {"/riverui/jobs?state=retryable"}}, http.Header{"X-Forwarded-Proto": {"https"}})
	require.Equal(t, "/riverui/jobs?state=retryable", resp.Header.Get("Location"))
	require.True(t, resp.Cookies()[0].Secure, "behind TLS")

	for _, path := range []string{"/riverui/api/queues", "/riverui/api/jobs?state=retryable&limit=20", "/riverui/", "/console/", "/console/failed"} {
		code, _, _ := s.page(t, path, withCookie(cookie))
		require.Equal(t, http.StatusOK, code, "%s with the cookie", path)
		code, _, _ = s.page(t, path, nil)
		require.Equal(t, http.StatusUnauthorized, code, "%s without it", path)
	}
	forged := *cookie
	forged.Value = "9999999999." + strings.SplitN(cookie.Value, ".", 2)[1]
	code, _, _ = s.page(t, "/riverui/api/queues", withCookie(&forged))
	require.Equal(t, http.StatusUnauthorized, code, "a changed expiry breaks the signature")

	// A state-changing request under the cookie needs the CSRF proof.
	resp = s.postForm(t, "/console/failed/requeue", url.Values{"confirm": {"yes"}}, http.Header{"Cookie": {cookie.String()}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp = s.postForm(t, "/console/failed/requeue", url.Values{"confirm": {"yes"}, "csrf_token": {admin.CSRFToken(adminToken)}}, http.Header{"Cookie": {cookie.String()}})
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// The console's pages offer the logout, which clears the cookie.
	code, body, _ = s.page(t, "/console/", withCookie(cookie))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `action="/console/logout"`)
	require.Contains(t, body, `href="/riverui/jobs?state=retryable"`, "the navigation shows River UI's Retryable list")
	resp = s.postForm(t, "/console/logout", nil, http.Header{"Cookie": {cookie.String()}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/login", resp.Header.Get("Location"))
	require.Len(t, resp.Cookies(), 1)
	require.Equal(t, "hookledger_session", resp.Cookies()[0].Name)
	require.Less(t, resp.Cookies()[0].MaxAge, 0, "cleared")
}

// TestDevBannerNamesConsoleAndRiverUI: hookledger-dev dev's banner prints
// the console's login and River UI's Retryable list, and both answer
// there; without ADMIN_TOKEN it says how to turn them on.
func TestDevBannerNamesConsoleAndRiverUI(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	for _, token := range []string{adminToken, ""} {
		cfg, err := config.FromEnv(func(k string) string {
			return map[string]string{"DATABASE_URL": db.URL, "ADMIN_TOKEN": token, "LOG_LEVEL": "warn",
				"STRIPE_WEBHOOK_SECRET": secret, "DB_MAX_CONNS": "4"}[k]
		})
		require.NoError(t, err)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		out, w := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- app.Dev(ctx, cfg, ln, w, io.Discard)
			w.Close()
		}()
		sc := bufio.NewScanner(out)
		var banner []string
		for len(banner) < 3 && sc.Scan() {
			banner = append(banner, sc.Text())
		}
		require.Len(t, banner, 3, "the banner's lines")
		base := "http://" + ln.Addr().String()
		s := &server{db: db, base: base}
		dbtest.Eventually(t, func() bool {
			req, err := http.NewRequest(http.MethodGet, base+"/readyz", nil)
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, "dev serves")
		if token == "" {
			require.Equal(t, "console and River UI are off: set ADMIN_TOKEN to open "+base+"/console/ and "+base+"/riverui/", banner[2])
		} else {
			m := regexp.MustCompile(`^console: (\S+)   River UI: (\S+)   \(log in with ADMIN_TOKEN\)$`).FindStringSubmatch(banner[2])
			require.NotNil(t, m, "banner %q", banner[2])
			require.Equal(t, base+"/console/login", m[1])
			require.Equal(t, base+"/riverui/jobs?state=retryable", m[2])
			code, _, _ := s.page(t, strings.TrimPrefix(m[1], base), nil)
			require.Equal(t, http.StatusOK, code)
			code, _, _ = s.page(t, strings.TrimPrefix(m[2], base), bearer(adminToken))
			require.Equal(t, http.StatusOK, code)
		}
		cancel()
		go func() { _, _ = io.Copy(io.Discard, out) }()
		require.NoError(t, <-done)
	}
}
