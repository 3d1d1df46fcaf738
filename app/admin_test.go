package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/app"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

const adminToken = "admin-token-for-tests"

func (s *server) admin(t *testing.T, method, path string, auth func(*http.Request)) (int, map[string]any, http.Header) {
	t.Helper()
	code, raw, h := s.raw(t, method, path, auth)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return code, out, h
}

// raw sends a bodiless request and returns the status, body and headers.
func (s *server) raw(t *testing.T, method, path string, auth func(*http.Request)) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, nil)
	require.NoError(t, err)
	if auth != nil {
		auth(req)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, resp.Header
}

func bearer(token string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
}

func basic(token string) func(*http.Request) {
	return func(r *http.Request) { r.SetBasicAuth("ops", token) }
}

func TestAdminOffWithoutToken(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	for _, path := range []string{"/admin/events", "/admin/stats", "/riverui/"} {
		code, _, _ := s.admin(t, http.MethodGet, path, bearer("anything"))
		require.Equal(t, http.StatusNotFound, code, path)
	}
}

func TestAdminAuth(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	paths := []struct {
		method, path string
		want         int // with the token
	}{
		{"GET", "/admin/events", http.StatusOK}, {"GET", "/admin/events/evt_x", http.StatusNotFound},
		{"POST", "/admin/events/evt_x/requeue", http.StatusNotFound}, {"POST", "/admin/events/requeue?status=failed", http.StatusOK},
		{"POST", "/admin/events/evt_x/discard", http.StatusBadRequest}, {"POST", "/admin/events/requeue?status=discarded", http.StatusOK},
		{"GET", "/admin/stats", http.StatusOK}, {"GET", "/riverui/", http.StatusOK},
	}
	for _, p := range paths {
		for name, auth := range map[string]func(*http.Request){
			"none": nil, "wrong bearer": bearer("guess"), "wrong basic": basic("guess"), "empty bearer": bearer(""),
		} {
			code, _, h := s.admin(t, p.method, p.path, auth)
			require.Equal(t, http.StatusUnauthorized, code, "%s %s with %s", p.method, p.path, name)
			require.Equal(t, `Basic realm="hookledger"`, h.Get("WWW-Authenticate"))
		}
		code, _, _ := s.admin(t, p.method, p.path, bearer(adminToken))
		require.Equal(t, p.want, code, "%s %s", p.method, p.path)
	}
	code, _, _ := s.admin(t, "GET", "/admin/stats", basic(adminToken))
	require.Equal(t, http.StatusOK, code, "basic auth with the token as password, for browsers")

	req, _ := http.NewRequest("GET", s.base+"/riverui/", nil)
	basic(adminToken)(req)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "<html")
}

func TestAdminEventsAPI(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	auth := bearer(adminToken)

	code, out, _ := s.admin(t, "GET", "/admin/events", auth)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, []any{}, out["events"], "events is [] when empty")
	require.Equal(t, "", out["next"])

	now := time.Now()
	for i := range 5 {
		body := []byte(fmt.Sprintf(`{"id":"evt_list_%d","type":%q,"created":%d,"data":{"object":{"id":"in_%d"}}}`, i, app.UnhandledType, now.Unix(), i))
		code, _ := s.post(t, "/webhooks/stripe", body, signed(body, now))
		require.Equal(t, http.StatusOK, code)
	}
	for i := range 5 {
		s.waitSettled(t, fmt.Sprintf("evt_list_%d", i))
	}

	var seen []string
	next := ""
	for page := 0; ; page++ {
		path := "/admin/events?limit=2&status=settled&type=" + app.UnhandledType
		if next != "" {
			path += "&after=" + next
		}
		code, out, _ = s.admin(t, "GET", path, auth)
		require.Equal(t, http.StatusOK, code)
		for _, e := range out["events"].([]any) {
			ev := e.(map[string]any)
			seen = append(seen, ev["event_id"].(string))
			for _, k := range []string{"event_id", "source", "event_type", "status", "attempts", "last_error", "received_at", "settled_at"} {
				require.Contains(t, ev, k)
			}
			_, err := time.Parse(time.RFC3339, ev["received_at"].(string))
			require.NoError(t, err)
		}
		next = out["next"].(string)
		if next == "" {
			require.Equal(t, 2, page, "three pages of 2, 2 and 1")
			break
		}
	}
	require.Equal(t, []string{"evt_list_4", "evt_list_3", "evt_list_2", "evt_list_1", "evt_list_0"}, seen, "newest first")

	code, out, _ = s.admin(t, "GET", "/admin/events?source=github", auth)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, out["events"])
	code, _, _ = s.admin(t, "GET", "/admin/events?status=bogus", auth)
	require.Equal(t, http.StatusBadRequest, code)
	code, _, _ = s.admin(t, "GET", "/admin/events?limit=501", auth)
	require.Equal(t, http.StatusBadRequest, code)
	code, _, _ = s.admin(t, "GET", "/admin/events?since=yesterday", auth)
	require.Equal(t, http.StatusBadRequest, code)

	code, out, _ = s.admin(t, "GET", "/admin/events/evt_list_3", auth)
	require.Equal(t, http.StatusOK, code)
	ev := out["event"].(map[string]any)
	require.Equal(t, "settled", ev["status"])
	require.Equal(t, "evt_list_3", ev["payload"].(map[string]any)["id"])
	require.Equal(t, []any{}, ev["handlers"], "no module handles the reserved type")
	require.Equal(t, []any{}, ev["failures"])
	require.NotContains(t, ev, "discard_reason")
	job := out["job"].(map[string]any)
	require.Equal(t, "completed", job["state"])
	require.Equal(t, 1.0, job["attempt"])
	require.Equal(t, "apply_event", job["kind"])
	require.Nil(t, job["scheduled_at"])

	code, _, _ = s.admin(t, "GET", "/admin/events/evt_nope", auth)
	require.Equal(t, http.StatusNotFound, code)

	code, out, _ = s.admin(t, "POST", "/admin/events/evt_list_3/requeue", auth)
	require.Equal(t, http.StatusConflict, code, "settled events need force: %v", out)
	code, out, _ = s.admin(t, "POST", "/admin/events/evt_list_3/requeue?force=true", auth)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, 1.0, out["requeued"])
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_list_3' AND status = 'settled' AND attempts = 2`) == 1
	}, "re-applied once more")
}

// TestRequeueFailed: a poison payload fails permanently; requeue puts the
// row back to claimed and runs River's existing job again, one event or
// every failed one.
func TestRequeueFailed(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	auth := bearer(adminToken)
	now := time.Now()
	for _, id := range []string{"evt_poison_1", "evt_poison_2"} {
		body := []byte(fmt.Sprintf(`{"id":%q,"type":"customer.subscription.updated","created":%d,"data":{"object":{}}}`, id, now.Unix()))
		code, _ := s.post(t, "/webhooks/stripe", body, signed(body, now))
		require.Equal(t, http.StatusOK, code)
	}
	failed := func(n int) func() bool {
		return func() bool {
			return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'failed' AND attempts = $1`, n) == 2
		}
	}
	dbtest.Eventually(t, failed(1))
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND state = 'cancelled'`) == 2
	}, "River stops retrying a poison payload")
	code, out, _ := s.admin(t, "GET", "/admin/events/evt_poison_1", auth)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, out["event"].(map[string]any)["last_error"], "data.object.id: required member is missing")
	require.Equal(t, "cancelled", out["job"].(map[string]any)["state"])

	code, out, _ = s.admin(t, "POST", "/admin/events/evt_poison_1/requeue", auth)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"requeued": 1.0, "result": "requeued"}, out)
	// Its job runs again and fails for good again; evt_poison_2 is untouched.
	attempts := func(n1, n2 int) func() bool {
		return func() bool {
			return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'failed' AND
				((event_id = 'evt_poison_1' AND attempts = $1) OR (event_id = 'evt_poison_2' AND attempts = $2))`, n1, n2) == 2 &&
				s.db.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND state = 'cancelled'`) == 2
		}
	}
	dbtest.Eventually(t, attempts(2, 1), "River's job of evt_poison_1 ran again")

	code, out, _ = s.admin(t, "POST", "/admin/events/requeue?status=failed", auth)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"requeued": 2.0, "pending": 0.0, "skipped": 0.0}, out, "both failed events, neither running")
	dbtest.Eventually(t, attempts(3, 2), "both jobs ran again")
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event'`), "one job per event, ever")

	// The oldest pending row's age, read before and after the request.
	oldest := func() int {
		return s.db.Count(t, `SELECT floor(EXTRACT(EPOCH FROM now() - min(received_at)))::int FROM webhook_event WHERE status IN ('claimed', 'failed')`)
	}
	before := oldest()
	code, out, _ = s.admin(t, "GET", "/admin/stats", auth)
	after := oldest()
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"claimed": 0.0, "processing": 0.0, "settled": 0.0, "failed": 2.0, "discarded": 0.0}, out["by_status"])
	got := int(out["oldest_pending_seconds"].(float64))
	require.True(t, before <= got && got <= after, "oldest_pending_seconds %d, the ledger says %d to %d", got, before, after)
}

func TestStatsAndMetricsCountDuplicates(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	body := subEvent("evt_dup_stats", "active", time.Now().Unix())
	for range 3 {
		code, _ := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
		require.Equal(t, http.StatusOK, code)
	}
	code, _ := s.post(t, "/webhooks/stripe", body, http.Header{"Stripe-Signature": {"t=1,v1=00"}})
	require.Equal(t, http.StatusUnauthorized, code)
	s.waitSettled(t, "evt_dup_stats")

	code, out, _ := s.admin(t, "GET", "/admin/stats", bearer(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"last_hour": 2.0, "last_day": 2.0}, out["duplicates"].(map[string]any)["stripe"])
	require.Equal(t, 1.0, out["by_status"].(map[string]any)["settled"])
	require.Equal(t, 0.0, out["oldest_pending_seconds"])

	metrics := s.metrics(t)
	for _, want := range []string{
		`hookledger_deliveries_total{outcome="claimed",source="stripe"} 1`,
		`hookledger_deliveries_total{outcome="duplicate",source="stripe"} 2`,
		`hookledger_deliveries_total{outcome="invalid_signature",source="stripe"} 1`,
		`hookledger_applies_total{event_type="customer.subscription.updated",outcome="settled",provider="stripe"} 1`,
		`hookledger_ledger_backlog{status="claimed"} 0`,
		`hookledger_ledger_oldest_pending_seconds 0`,
		`hookledger_ledger_oldest_failed_seconds 0`,
		`hookledger_claim_duration_seconds_count{source="stripe"} 3`,
		`hookledger_apply_duration_seconds_count{provider="stripe"} 1`,
	} {
		require.Contains(t, metrics, want)
	}
	code, _ = s.post(t, "/webhooks/../admin", body, nil)
	require.Equal(t, http.StatusNotFound, code)
	require.NotContains(t, s.metrics(t), `source="admin"`, "source labels come from configuration, never the path")
}

func (s *server) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestLogOnlyAppliesDuplicates: in log-only mode a duplicate is still
// answered "duplicate", logged and counted, and applied again (the ledger
// row's second attempt); the usage module replaces the event's delta when
// it is applied again, so its total does not double.
func TestLogOnlyAppliesDuplicates(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{
		"ADMIN_TOKEN": adminToken, "CLAIM_MODE": "log-only",
		"STANDARD_WEBHOOK_SECRET": providerSecrets["standard"],
	})
	body := []byte(`{"type":"usage.recorded","timestamp":"2026-12-01T00:00:00Z","data":{"customer_id":"cus_lo","metric":"calls","quantity":7}}`)
	for _, want := range []string{"claimed", "duplicate"} {
		h := standardSigned(t, "msg_log_only", body)
		code, out := s.post(t, "/webhooks/standard", body, h)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, want, out["status"])
		// A duplicate of an event still to be applied is left to its own
		// job; one of an applied event is applied again.
		s.waitSettled(t, "msg_log_only")
	}
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'msg_log_only' AND status = 'settled' AND attempts = 2`) == 1
	}, "the duplicate is applied again")
	require.Equal(t, 7, s.db.Count(t, `SELECT COALESCE(sum(quantity), 0) FROM usage_total WHERE customer_id = 'cus_lo'`))
	require.Contains(t, s.metrics(t), `hookledger_log_only_would_skip_total{source="standard"} 1`)
	_, out, _ := s.admin(t, "GET", "/admin/stats", bearer(adminToken))
	require.Equal(t, 1.0, out["duplicates"].(map[string]any)["standard"].(map[string]any)["last_hour"])
}

func TestEventsAndPruneCommands(t *testing.T) {
	// The service keeps a year: its own prune job, run when its River
	// elects a leader (late on a loaded machine), must not take the row
	// aged below for the CLI's prune, which keeps the default 90 days.
	s := start(t, map[string]string{"RETENTION": "8760h"})
	body := subEvent("evt_cli", "active", time.Now().Unix())
	code, _ := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code)
	s.waitSettled(t, "evt_cli")
	t.Setenv("DATABASE_URL", s.db.URL)
	t.Setenv("STRIPE_WEBHOOK_SECRET", secret)

	code, stdout, stderr := run("events", "list", "--status", "settled")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "evt_cli")
	code, stdout, _ = run("events", "show", "evt_cli")
	require.Equal(t, 0, code)
	var shown map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &shown))
	require.Equal(t, "settled", shown["event"].(map[string]any)["status"])

	code, _, stderr = run("events", "requeue", "evt_cli")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "settled")
	code, stdout, _ = run("events", "requeue", "--force", "--type", "customer.subscription.*", "--dry-run")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "would requeue 1 settled")
	code, stdout, _ = run("events", "requeue", "evt_cli", "--force")
	require.Equal(t, 0, code, stdout)
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_cli' AND status = 'settled' AND attempts = 2`) == 1
	})

	_, err := s.db.SQL.Exec(`UPDATE webhook_event SET received_at = now() - interval '100 days'`)
	require.NoError(t, err)
	code, stdout, _ = run("prune", "--dry-run")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "would delete 1 settled")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
	code, stdout, _ = run("prune")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "deleted 1")
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Equal(t, 2, badCount(run("events", "list", "--status", "nope")))
	require.True(t, strings.Contains(os.Getenv("DATABASE_URL"), s.db.Name))
}

func badCount(code int, _, _ string) int { return code }
