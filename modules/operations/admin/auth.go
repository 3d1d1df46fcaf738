package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/core/web"
)

// CSRFHeader carries the CSRF token of a browser's state-changing request
// (GET /admin/csrf returns it).
const CSRFHeader = "X-CSRF-Token"

// CSRFField carries the same token in an HTML form (the console's).
const CSRFField = "csrf_token"

// CSRFToken is the CSRF token of the admin token: what pages put in
// CSRFHeader or in a form's CSRFField.
func CSRFToken(token string) string { return csrfValue(token) }

// Auth accepts "Authorization: Bearer <token>", HTTP basic auth with the
// token as password, or the session cookie of a browser that logged in
// (Sessions), compared in constant time; anything else gets 401 with a
// Basic challenge. Basic credentials and the cookie are sent by a
// browser on its own, even for a form another site submits, so a
// state-changing request (any method but GET, HEAD and OPTIONS) under
// either must also prove it is not cross-site: Sec-Fetch-Site
// same-origin, or (from a browser that sends no Sec-Fetch-Site) an Origin
// equal to the request's host, or the CSRF token (in CSRFHeader, or in a
// form's CSRFField); else 403. A token that is present decides alone: a
// wrong one is refused whatever the other headers say. A bearer
// token is never sent by a browser unasked, so it always works.
//
// Wrong tokens are counted per client address in throttle (a throttle of
// its own when nil): once a client has spent its failures, its wrong
// tokens get 429 with Retry-After until it has earned one back. The token
// is compared first, so the right one is never throttled; the price is
// that a guesser learns the answer to every guess it sends (429 is "wrong"
// too), so the guessing rate is what the server can compare, and a long
// random token is the defence (docs/SECURITY.md). A request with no
// credentials at all spends nothing, and gets 401.
func Auth(token string, m *metrics.Set, throttle *Throttle) gin.HandlerFunc {
	if throttle == nil {
		throttle = NewThrottle()
	}
	want := sha256.Sum256([]byte(token))
	csrf := csrfValue(token)
	session := sessionKey(token)
	refuse := func(c *gin.Context, status int, reason, msg string) {
		web.Logger(c).Info("admin request refused", zap.String("reason", reason),
			zap.String("origin", c.GetHeader("Origin")), zap.String("sec_fetch_site", c.GetHeader("Sec-Fetch-Site")))
		if m != nil {
			m.AdminRefusals.WithLabelValues(reason).Inc()
		}
		c.AbortWithStatusJSON(status, gin.H{"error": msg})
	}
	return func(c *gin.Context) {
		var got string
		bearer, isBearer := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
		if isBearer {
			got = bearer
		} else if _, pass, ok := c.Request.BasicAuth(); ok {
			got = pass
		}
		if got == "" && validSession(c.Request, session, time.Now()) {
			// A browser's session cookie: sent by the browser on its own,
			// as basic credentials are, so it needs the same CSRF proof.
			if changesState(c.Request.Method) && !sameOrigin(c.Request, csrf) {
				refuse(c, http.StatusForbidden, "cross_site", "a state-changing request with the session cookie needs a same-origin Origin or Sec-Fetch-Site, or "+CSRFHeader)
				return
			}
			c.Next()
			return
		}
		if got == "" {
			c.Header("WWW-Authenticate", `Basic realm="hookledger"`)
			refuse(c, http.StatusUnauthorized, "unauthorized", "token required")
			return
		}
		sum := sha256.Sum256([]byte(got))
		if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			addr, _ := netip.ParseAddr(c.ClientIP())
			wait, last := throttle.Fail(addr)
			if wait > 0 {
				if m != nil {
					m.AdminRefusals.WithLabelValues("throttled").Inc()
				}
				c.Header("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
				c.AbortWithStatusJSON(http.StatusTooManyRequests, gin.H{"error": "too many failed authentications from this address; retry after Retry-After seconds"})
				return
			}
			if last {
				web.Logger(c).Warn("admin authentication throttled: too many wrong tokens", zap.String("client_ip", c.ClientIP()))
			}
			c.Header("WWW-Authenticate", `Basic realm="hookledger"`)
			refuse(c, http.StatusUnauthorized, "unauthorized", "token required")
			return
		}
		if !isBearer && changesState(c.Request.Method) && !sameOrigin(c.Request, csrf) {
			refuse(c, http.StatusForbidden, "cross_site",
				"a state-changing request with basic auth needs a same-origin Origin or Sec-Fetch-Site, or "+CSRFHeader+"; scripts should use Authorization: Bearer")
			return
		}
		c.Next()
	}
}

func changesState(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// sameOrigin reports whether the request proves it was not sent by
// another site.
func sameOrigin(r *http.Request, csrf string) bool {
	got := r.Header.Get(CSRFHeader)
	if got == "" && strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		got = r.PostFormValue(CSRFField)
	}
	if got != "" {
		return subtle.ConstantTimeCompare([]byte(got), []byte(csrf)) == 1
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return false
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// csrfValue is the CSRF token: derived from the admin token, so every
// process of a deployment agrees on it and it changes with the token.
func csrfValue(token string) string {
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("hookledger csrf"))
	return hex.EncodeToString(mac.Sum(nil))
}

// csrfToken answers GET /admin/csrf with the token a page puts in
// X-CSRF-Token. A cross-site page cannot read the answer.
func csrfToken(token string) gin.HandlerFunc {
	v := csrfValue(token)
	return func(c *gin.Context) {
		c.Header("Cache-Control", "no-store")
		c.JSON(http.StatusOK, gin.H{"csrf_token": v})
	}
}
