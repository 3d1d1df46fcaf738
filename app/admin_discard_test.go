package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/app"
)

// discardPlanEvent is a Stripe subscription event of its own subscription with
// the given plan.
func discardPlanEvent(id, plan string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"customer.subscription.updated","created":%d,`+
		`"data":{"object":{"id":"sub_%s","customer":"cus_d","status":"active","items":{"data":[{"price":{"id":%q}}]}}}}`,
		id, time.Now().Unix(), id, plan))
}

// discardFailingEvent delivers an event the broken plan makes fail, waits for
// its failure, and parks its automatic retries an hour away (caught while
// its job waits, never while it runs), so nothing applies it meanwhile.
func discardFailingEvent(t *testing.T, s *server, id string) {
	t.Helper()
	body := discardPlanEvent(id, "price_broken")
	code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code, "%v", out)
	parkRetries(t, s, id)
}

// discardBody is a discard request's body.
func discardBody(reason string) []byte {
	return []byte(fmt.Sprintf(`{"reason":%q}`, reason))
}

// discardHeaders are the headers auth sets on a request.
func discardHeaders(auth func(*http.Request)) http.Header {
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	auth(req)
	return req.Header
}

// TestDiscardAPI: a failing event is discarded with its reason (400
// without one, 404 unknown, 409 settled, 403 cross-site under basic
// auth), leaves the backlog, shows its failure history, and a requeue
// brings it back to settle once its handler works.
func TestDiscardAPI(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	auth := discardHeaders(bearer(adminToken))
	lift := refuseBrokenPlan(t, s)

	ok := discardPlanEvent("evt_disc_ok", "price_pro")
	code, _ := s.post(t, "/webhooks/stripe", ok, signed(ok, time.Now()))
	require.Equal(t, http.StatusOK, code)
	s.waitSettled(t, "evt_disc_ok")
	discardFailingEvent(t, s, "evt_disc_broken")
	path := "/admin/events/evt_disc_broken/discard"

	// No reason, bad JSON, a body over the limit: nothing changes.
	for name, body := range map[string][]byte{
		"no body": nil, "no reason": []byte(`{}`), "blank reason": discardBody("  "),
		"not JSON": []byte(`{"reason":`), "reason not a string": []byte(`{"reason":7}`),
	} {
		code, out := s.post(t, path, body, auth)
		require.Equal(t, http.StatusBadRequest, code, "%s: %v", name, out)
		require.NotEmpty(t, out["error"], name)
	}
	code, _ = s.post(t, path, discardBody(strings.Repeat("x", 20<<10)), auth)
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	code, out := s.post(t, "/admin/events/evt_disc_nope/discard", discardBody("gone"), auth)
	require.Equal(t, http.StatusNotFound, code, "%v", out)
	code, out = s.post(t, path+"?namespace=paddle", discardBody("gone"), auth)
	require.Equal(t, http.StatusNotFound, code, "another namespace: %v", out)
	code, out = s.post(t, "/admin/events/evt_disc_ok/discard", discardBody("gone"), auth)
	require.Equal(t, http.StatusConflict, code, "a settled event cannot be discarded: %v", out)
	require.Contains(t, out["error"], "settled")
	require.Equal(t, "settled", status(t, s, "evt_disc_ok"))

	// Another site's request with the operator's basic credentials is
	// refused, as requeue's is.
	crossSite := discardHeaders(basic(adminToken))
	crossSite.Set("Origin", "http://evil.example")
	code, _ = s.post(t, path, discardBody("forged"), crossSite)
	require.Equal(t, http.StatusForbidden, code)
	code, _ = s.post(t, "/admin/events/evt_disc_broken/requeue", nil, crossSite)
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, "failed", status(t, s, "evt_disc_broken"))

	code, out = s.post(t, path+"?namespace=stripe", discardBody("customer deleted in Stripe"), auth)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, "evt_disc_broken", out["event_id"])
	require.Equal(t, "discarded", out["status"])
	require.Equal(t, "customer deleted in Stripe", out["discard_reason"])
	require.Contains(t, out, "payload")
	var reason string
	require.NoError(t, s.db.SQL.QueryRow(`SELECT status || ': ' || discard_reason FROM webhook_event WHERE event_id = 'evt_disc_broken'`).Scan(&reason))
	require.Equal(t, "discarded: customer deleted in Stripe", reason)
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event' AND args->>'event_id' = 'evt_disc_broken' AND state = 'cancelled'`),
		"River will not run it again")

	// It leaves the backlog.
	code, stats, _ := s.admin(t, "GET", "/admin/stats", bearer(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"claimed": 0.0, "processing": 0.0, "settled": 1.0, "failed": 0.0, "discarded": 1.0}, stats["by_status"])
	require.Equal(t, 0.0, stats["oldest_pending_seconds"])

	// The list filters on it; the detail has its reason, its failures and
	// its job.
	code, list, _ := s.admin(t, "GET", "/admin/events?status=discarded", bearer(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.Len(t, list["events"], 1)
	item := list["events"].([]any)[0].(map[string]any)
	require.Equal(t, "evt_disc_broken", item["event_id"])
	require.Equal(t, "customer deleted in Stripe", item["discard_reason"])
	require.Contains(t, item, "handlers")
	require.Nil(t, item["handlers"], "never applied")
	require.NotContains(t, item, "failures", "the history is in the detail")

	code, detail, _ := s.admin(t, "GET", "/admin/events/evt_disc_broken", bearer(adminToken))
	require.Equal(t, http.StatusOK, code)
	ev := detail["event"].(map[string]any)
	require.Equal(t, "discarded", ev["status"])
	require.Equal(t, "customer deleted in Stripe", ev["discard_reason"])
	failures := ev["failures"].([]any)
	require.NotEmpty(t, failures)
	for i, f := range failures {
		f := f.(map[string]any)
		require.Equal(t, float64(i+1), f["attempt"])
		require.Greater(t, f["job_id"], 0.0)
		_, err := time.Parse(time.RFC3339, f["at"].(string))
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(f["handler"].(string), "subscription."), "the module's handler: %v", f["handler"])
		require.True(t, strings.HasPrefix(f["error"].(string), f["handler"].(string)+": "), "%v", f["error"])
		require.Contains(t, f["error"], "no_broken_plan")
	}
	job := detail["job"].(map[string]any)
	require.Equal(t, "apply_event", job["kind"])
	require.Equal(t, "cancelled", job["state"])
	require.Greater(t, job["max_attempts"], 1.0)
	require.Contains(t, job, "scheduled_at")
	require.Nil(t, job["scheduled_at"], "a cancelled job has no next run")
	require.NotEmpty(t, job["errors"])

	// Discarding it again replaces the reason.
	code, out = s.post(t, path, discardBody("duplicate of evt_disc_ok"), auth)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, "duplicate of evt_disc_ok", out["discard_reason"])

	// Fixed: a bulk requeue of the discarded brings it back, and it settles.
	lift()
	code, out = s.post(t, "/admin/events/requeue?status=discarded", nil, auth)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, 1.0, out["requeued"])
	s.waitSettled(t, "evt_disc_broken")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE plan = 'price_broken'`))

	code, detail, _ = s.admin(t, "GET", "/admin/events/evt_disc_broken", bearer(adminToken))
	require.Equal(t, http.StatusOK, code)
	ev = detail["event"].(map[string]any)
	require.Equal(t, []any{"subscription"}, ev["handlers"])
	require.NotContains(t, ev, "discard_reason")
	require.Len(t, ev["failures"], len(failures), "the history outlives the recovery")
	require.Equal(t, "completed", detail["job"].(map[string]any)["state"])
	_, stats, _ = s.admin(t, "GET", "/admin/stats", bearer(adminToken))
	require.Equal(t, 0.0, stats["by_status"].(map[string]any)["discarded"])
	require.Equal(t, 2.0, stats["by_status"].(map[string]any)["settled"])
}

// TestDiscardedRequeuedOneByOne: a discarded event comes back through the
// single-event requeue too, to claimed, and settles once its handler
// works; an event no handler matches settles with handlers [].
func TestDiscardedRequeuedOneByOne(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	auth := discardHeaders(bearer(adminToken))
	lift := refuseBrokenPlan(t, s)
	discardFailingEvent(t, s, "evt_disc_one")

	// Basic auth with the CSRF proof works, as for requeue.
	browser := discardHeaders(basic(adminToken))
	browser.Set("Sec-Fetch-Site", "same-origin")
	code, out := s.post(t, "/admin/events/evt_disc_one/discard", discardBody("poison"), browser)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, "discarded", status(t, s, "evt_disc_one"))

	code, out = s.post(t, "/admin/events/evt_disc_one/requeue", nil, auth)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, map[string]any{"requeued": 1.0, "result": "requeued"}, out)
	require.Contains(t, []string{"claimed", "failed"}, status(t, s, "evt_disc_one"), "back in the backlog")
	var reason *string
	require.NoError(t, s.db.SQL.QueryRow(`SELECT discard_reason FROM webhook_event WHERE event_id = 'evt_disc_one'`).Scan(&reason))
	require.Nil(t, reason)
	lift()
	s.waitSettled(t, "evt_disc_one")

	unhandled := []byte(fmt.Sprintf(`{"id":"evt_disc_unhandled","type":%q,"created":%d,"data":{"object":{"id":"in_1"}}}`, app.UnhandledType, time.Now().Unix()))
	code, _ = s.post(t, "/webhooks/stripe", unhandled, signed(unhandled, time.Now()))
	require.Equal(t, http.StatusOK, code)
	s.waitSettled(t, "evt_disc_unhandled")
	code, detail, _ := s.admin(t, "GET", "/admin/events/evt_disc_unhandled", bearer(adminToken))
	require.Equal(t, http.StatusOK, code)
	ev := detail["event"].(map[string]any)
	require.Equal(t, []any{}, ev["handlers"], "no handler matched")
	require.Equal(t, []any{}, ev["failures"])
	code, out = s.post(t, "/admin/events/evt_disc_unhandled/discard", discardBody("x"), auth)
	require.Equal(t, http.StatusConflict, code, "%v", out)
}
