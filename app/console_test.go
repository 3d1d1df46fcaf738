package app_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/operations/admin"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// page GETs a console page and returns its status and body.
func (s *server) page(t *testing.T, path string, auth func(*http.Request)) (int, string, http.Header) {
	t.Helper()
	code, raw, h := s.raw(t, http.MethodGet, path, auth)
	return code, string(raw), h
}

func TestConsoleAuth(t *testing.T) {
	t.Parallel()
	off := start(t, nil)
	code, _, _ := off.page(t, "/console/", basic(adminToken))
	require.Equal(t, http.StatusNotFound, code, "no ADMIN_TOKEN, no console")

	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	for _, path := range []string{"/console/", "/console/events", "/console/failed", "/console/static/console.css"} {
		code, _, h := s.page(t, path, nil)
		require.Equal(t, http.StatusUnauthorized, code, path)
		require.Equal(t, `Basic realm="hookledger"`, h.Get("WWW-Authenticate"))
		code, _, _ = s.page(t, path, basic("guess"))
		require.Equal(t, http.StatusUnauthorized, code, path)
	}
	code, body, h := s.page(t, "/console/", basic(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "text/html; charset=utf-8", h.Get("Content-Type"))
	require.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.Contains(t, body, "<h1>Overview")
	for _, secret := range []string{secret, "whsec_other_secret", adminToken} {
		require.NotContains(t, body, secret, "no secret is ever rendered")
	}
	require.Contains(t, body, `href="/riverui/"`, "the console links to River UI")
}

// TestConsoleEscapesPayloads: payloads are attacker-influenced; every value
// from them is escaped on every page that shows it.
func TestConsoleEscapesPayloads(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	now := time.Now()
	body := []byte(fmt.Sprintf(`{"id":"evt_<b>bold</b>","type":"invoice.<script>alert(1)</script>","created":%d,`+
		`"data":{"object":{"id":"in_x","description":"<script>alert('payload')</script><img src=x onerror=alert(2)>","note":"</pre><h1>owned</h1>"}}}`, now.Unix()))
	code, _ := s.post(t, "/webhooks/stripe", body, signed(body, now))
	require.Equal(t, http.StatusOK, code)
	s.waitSettled(t, "evt_<b>bold</b>")

	code, list, _ := s.page(t, "/console/events", basic(adminToken))
	require.Equal(t, http.StatusOK, code)
	code, detail, _ := s.page(t, "/console/event?namespace=stripe&id="+url.QueryEscape("evt_<b>bold</b>"), basic(adminToken))
	require.Equal(t, http.StatusOK, code)
	for name, page := range map[string]string{"list": list, "detail": detail} {
		for _, raw := range []string{"<script>alert", "<b>bold</b>", "<img src=x", "<h1>owned</h1>"} {
			require.NotContains(t, page, raw, "%s renders %q unescaped", name, raw)
		}
		require.Contains(t, page, "evt_&lt;b&gt;bold&lt;/b&gt;", name)
		require.Contains(t, page, "invoice.&lt;script&gt;alert(1)&lt;/script&gt;", name)
	}
	require.Contains(t, detail, "&lt;script&gt;alert(&#39;payload&#39;)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;")
	require.Contains(t, detail, "&lt;/pre&gt;&lt;h1&gt;owned&lt;/h1&gt;")
	require.Contains(t, detail, "\n  &#34;data&#34;: {", "the payload is pretty-printed")
}

// TestConsoleActionsNeedCSRFProof: under basic auth an action needs the
// form's CSRF token (or a same-origin browser's proof); a wrong token is
// refused whatever else the request says.
func TestConsoleActionsNeedCSRFProof(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	now := time.Now()
	body := []byte(fmt.Sprintf(`{"id":"evt_csrf","type":"customer.subscription.updated","created":%d,"data":{"object":{}}}`, now.Unix()))
	code, _ := s.post(t, "/webhooks/stripe", body, signed(body, now))
	require.Equal(t, http.StatusOK, code)
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_csrf' AND status = 'failed'`) == 1 &&
			s.db.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND state = 'cancelled'`) == 1
	}, "the poison event fails for good")

	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(form url.Values, header map[string]string) int {
		form.Set("namespace", "stripe")
		form.Set("id", "evt_csrf")
		req, err := http.NewRequest(http.MethodPost, s.base+"/console/event/requeue", strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		basic(adminToken)(req)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusForbidden, post(url.Values{}, nil), "no proof")
	require.Equal(t, http.StatusForbidden, post(url.Values{}, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}))
	require.Equal(t, http.StatusForbidden, post(url.Values{admin.CSRFField: {"forged"}}, map[string]string{"Sec-Fetch-Site": "same-origin"}),
		"a wrong token decides alone")
	require.Equal(t, "failed", status(t, s, "evt_csrf"), "a refused action changes nothing")

	_, page, _ := s.page(t, "/console/event?namespace=stripe&id=evt_csrf", basic(adminToken))
	require.Contains(t, page, `name="csrf_token" value="`+admin.CSRFToken(adminToken)+`"`)
	require.Equal(t, http.StatusSeeOther, post(url.Values{admin.CSRFField: {admin.CSRFToken(adminToken)}}, nil))
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_csrf' AND attempts = 2`) == 1
	}, "the requeued event is applied again")
}

func status(t *testing.T, s *server, id string) string {
	t.Helper()
	var st string
	require.NoError(t, s.db.SQL.QueryRow(`SELECT status FROM webhook_event WHERE event_id = $1`, id).Scan(&st))
	return st
}
