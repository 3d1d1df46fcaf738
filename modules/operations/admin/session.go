package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/modules/core/metrics"
)

// SessionCookie is the cookie a browser that logged in at /console/login
// sends: the console, River UI and River UI's API accept it as they
// accept the token.
const SessionCookie = "hookledger_session"

// SessionLifetime bounds a session: the cookie and the signed expiry in
// it end together, and the operator logs in again.
const SessionLifetime = 12 * time.Hour

// sessionKey is the key sessions are signed with: derived from the admin
// token, so every process of a deployment accepts the others' sessions
// and a new token ends every session.
func sessionKey(token string) []byte {
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("hookledger session v1"))
	return mac.Sum(nil)
}

// sessionValue is a session that ends at expires: the expiry in Unix
// seconds and its signature.
func sessionValue(key []byte, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(exp))
	return exp + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// validSession reports whether r carries a session signed with key that
// has not expired.
func validSession(r *http.Request, key []byte, now time.Time) bool {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return false
	}
	exp, _, ok := strings.Cut(c.Value, ".")
	unix, err := strconv.ParseInt(exp, 10, 64)
	if !ok || err != nil || !now.Before(time.Unix(unix, 0)) || time.Unix(unix, 0).After(now.Add(SessionLifetime)) {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(c.Value), []byte(sessionValue(key, time.Unix(unix, 0)))) == 1
}

// Sessions logs a browser in with the admin token and out again: the
// session cookie is HttpOnly, SameSite=Strict, Secure when the request
// came over TLS, and ends after SessionLifetime or when the token
// changes.
type Sessions struct {
	want     [sha256.Size]byte
	key      []byte
	throttle *Throttle
	metrics  *metrics.Set
	now      func() time.Time
}

// NewSessions returns the sessions of token; wrong tokens spend the
// client's tries in throttle, as Auth's do (share Auth's throttle).
func NewSessions(token string, m *metrics.Set, throttle *Throttle) *Sessions {
	if throttle == nil {
		throttle = NewThrottle()
	}
	return &Sessions{want: sha256.Sum256([]byte(token)), key: sessionKey(token), throttle: throttle, metrics: m, now: time.Now}
}

// Login sets the session cookie on w when token is the admin token and
// answers http.StatusOK. A wrong token is http.StatusUnauthorized, or
// http.StatusTooManyRequests with the seconds to wait once the client
// spent its tries; a request another site's page sent (Sec-Fetch-Site or
// Origin naming another site) is http.StatusForbidden, so no page can
// log a browser in to a session of its choosing.
func (s *Sessions) Login(w http.ResponseWriter, r *http.Request, clientIP, token string) (status, retryAfter int) {
	if crossSite(r) {
		return http.StatusForbidden, 0
	}
	sum := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(sum[:], s.want[:]) != 1 {
		addr, _ := netip.ParseAddr(clientIP)
		if wait, _ := s.throttle.Fail(addr); wait > 0 {
			if s.metrics != nil {
				s.metrics.AdminRefusals.WithLabelValues("throttled").Inc()
			}
			return http.StatusTooManyRequests, int(math.Ceil(wait.Seconds()))
		}
		if s.metrics != nil {
			s.metrics.AdminRefusals.WithLabelValues("unauthorized").Inc()
		}
		return http.StatusUnauthorized, 0
	}
	expires := s.now().Add(SessionLifetime)
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: sessionValue(s.key, expires), Path: "/",
		Expires: expires, MaxAge: int(SessionLifetime.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r),
	})
	return http.StatusOK, 0
}

// Logout clears the session cookie.
func (s *Sessions) Logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r)})
}

// overTLS reports whether the browser reached the service over TLS: the
// request's own, or a proxy's X-Forwarded-Proto. A client that claims
// https over plain HTTP only gets a cookie its browser will not send back.
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// crossSite reports whether a browser says another site sent r: its
// Sec-Fetch-Site is not same-origin, or its Origin is not this host.
// Browsers send one or both with every POST; a client that sends neither
// is no browser, and no other site's page.
func crossSite(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site != "same-origin"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return err != nil || !strings.EqualFold(u.Host, r.Host)
}
