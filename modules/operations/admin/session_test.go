package admin

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// TestSessionCookie: a login with the token sets an HttpOnly,
// SameSite=Strict cookie (Secure over TLS) that ends with its lifetime;
// Auth accepts it, refuses a state-changing request under it without a
// CSRF proof, and refuses it once expired, tampered with or signed with
// another token; a wrong token or another site's login sets none.
func TestSessionCookie(t *testing.T) {
	t.Parallel()
	const token = "session-test-token"
	th, clk := testThrottle()
	s := NewSessions(token, nil, th)
	s.now = clk.now

	login := func(tok string, header http.Header, tlsOn bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "http://ops.example/console/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			r.Header[k] = v
		}
		if tlsOn {
			r.TLS = &tls.ConnectionState{}
		}
		w := httptest.NewRecorder()
		status, _ := s.Login(w, r, "192.0.2.1", tok)
		w.Code = status
		return w
	}
	w := login("wrong", nil, false)
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Empty(t, w.Result().Cookies())
	w = login(token, http.Header{"Origin": {"https://evil.example"}}, false)
	require.Equal(t, http.StatusForbidden, w.Code)
	require.Empty(t, w.Result().Cookies())
	w = login(token, http.Header{"Sec-Fetch-Site": {"cross-site"}}, false)
	require.Equal(t, http.StatusForbidden, w.Code)

	w = login(token, http.Header{"Origin": {"http://ops.example"}, "Sec-Fetch-Site": {"same-origin"}}, true)
	require.Equal(t, http.StatusOK, w.Code)
	cookies := w.Result().Cookies()
	require.Len(t, cookies, 1)
	c := cookies[0]
	require.Equal(t, SessionCookie, c.Name)
	require.True(t, c.HttpOnly)
	require.True(t, c.Secure, "served over TLS")
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	require.Equal(t, int(SessionLifetime.Seconds()), c.MaxAge)
	require.False(t, login(token, nil, false).Result().Cookies()[0].Secure, "plain HTTP")

	// Auth on a clock of its own: sessions are checked against time.Now,
	// so the cookie is made for now.
	valid := &http.Cookie{Name: SessionCookie, Value: sessionValue(sessionKey(token), time.Now().Add(time.Hour))}
	e := gin.New()
	e.Any("/x", Auth(token, nil, NewThrottle()), func(c *gin.Context) { c.Status(http.StatusNoContent) })
	do := func(method string, cookie *http.Cookie, header http.Header) int {
		r := httptest.NewRequest(method, "http://ops.example/x", nil)
		if cookie != nil {
			r.AddCookie(cookie)
		}
		for k, v := range header {
			r.Header.Set(k, v[0])
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w.Code
	}
	require.Equal(t, http.StatusNoContent, do(http.MethodGet, valid, nil))
	require.Equal(t, http.StatusUnauthorized, do(http.MethodGet, nil, nil))
	require.Equal(t, http.StatusForbidden, do(http.MethodPost, valid, nil), "a POST under the cookie needs a CSRF proof")
	require.Equal(t, http.StatusForbidden, do(http.MethodPost, valid, http.Header{"Origin": {"https://evil.example"}}))
	require.Equal(t, http.StatusNoContent, do(http.MethodPost, valid, http.Header{CSRFHeader: {CSRFToken(token)}}))
	require.Equal(t, http.StatusNoContent, do(http.MethodPost, valid, http.Header{"Sec-Fetch-Site": {"same-origin"}}))
	for name, bad := range map[string]*http.Cookie{
		"expired":             {Name: SessionCookie, Value: sessionValue(sessionKey(token), time.Now().Add(-time.Second))},
		"another token":       {Name: SessionCookie, Value: sessionValue(sessionKey("old-token"), time.Now().Add(time.Hour))},
		"beyond its lifetime": {Name: SessionCookie, Value: sessionValue(sessionKey(token), time.Now().Add(SessionLifetime+time.Hour))},
		"tampered":            {Name: SessionCookie, Value: strings.Replace(valid.Value, ".", "0.", 1)},
		"garbage":             {Name: SessionCookie, Value: "x"},
	} {
		require.Equal(t, http.StatusUnauthorized, do(http.MethodGet, bad, nil), name)
	}

	w = httptest.NewRecorder()
	s.Logout(w, httptest.NewRequest(http.MethodGet, "http://ops.example/console/logout", nil))
	out := w.Result().Cookies()
	require.Len(t, out, 1)
	require.Equal(t, SessionCookie, out[0].Name)
	require.Less(t, out[0].MaxAge, 0, "cleared")
}
