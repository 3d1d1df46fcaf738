package app_test

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEraseSubject: erase lists, then erases, every stored payload that
// holds a customer id (a failed event is discarded first); no stored
// payload or header holds it afterwards, the rows keep their ids, types
// and status, other customers' payloads are untouched, redeliveries stay
// duplicates and an erased event cannot be requeued.
func TestEraseSubject(t *testing.T) {
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	forCustomer := func(id, customer string) []byte {
		return bytes.Replace(subEvent(id, "active", time.Now().Unix()), []byte(`"cus_e2e"`), []byte(`"`+customer+`"`), 1)
	}
	bodies := map[string][]byte{}
	for _, e := range []struct{ id, customer string }{
		{"evt_erase_1", "cus_gone"}, {"evt_erase_2", "cus_gone"}, {"evt_keep", "cus_stays"},
	} {
		bodies[e.id] = bytes.Replace(forCustomer(e.id, e.customer), []byte(`"sub_e2e"`), []byte(`"sub_`+e.id+`"`), 1)
		code, _ := s.post(t, "/webhooks/stripe", bodies[e.id], signed(bodies[e.id], time.Now()))
		require.Equal(t, http.StatusOK, code)
		s.waitSettled(t, e.id)
	}
	// A failed event of the customer: it can no longer be applied.
	_, err := s.db.SQL.Exec(`UPDATE webhook_event SET status = 'failed' WHERE event_id = 'evt_erase_2'`)
	require.NoError(t, err)
	t.Setenv("DATABASE_URL", s.db.URL)

	code, stdout, stderr := run("erase", "--subject", "cus_gone", "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "evt_erase_1")
	require.Contains(t, stdout, "evt_erase_2")
	require.NotContains(t, stdout, "evt_keep")
	require.Contains(t, stdout, "would erase 2 event payload(s)")
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE strpos(payload, 'cus_gone') > 0`), "a dry run changes nothing")

	code, _, stderr = run("erase", "--subject", "cus_gone")
	require.Equal(t, 2, code, "without a terminal it needs --yes")
	require.Contains(t, stderr, "--yes")
	code, stdout, stderr = run("erase", "--subject", "cus_gone", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "erased 2 event payload(s)")

	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE strpos(payload, 'cus_gone') > 0 OR strpos(coalesce(headers::text, ''), 'cus_gone') > 0`))
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE erased_at IS NOT NULL AND headers IS NULL
		AND event_type = 'customer.subscription.updated' AND event_id IN ('evt_erase_1', 'evt_erase_2')`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_erase_2' AND status = 'discarded'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_keep' AND strpos(payload, 'cus_stays') > 0 AND erased_at IS NULL`))

	code, page, _ := s.page(t, "/console/event?namespace=stripe&id=evt_erase_1", basic(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `id="erased"`, "the console shows the event as erased")
	require.NotContains(t, page, "cus_gone")
	code, page, _ = s.page(t, "/console/event?namespace=stripe&id=evt_keep", basic(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, page, `id="erased"`)

	for id, body := range bodies {
		code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "duplicate", out["status"], id)
	}
	code, _, stderr = run("events", "requeue", "--force", "evt_erase_1")
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "erased")
	code, stdout, _ = run("erase", "--subject", "cus_gone", "--yes")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "erased 0 event payload(s)", "erasing again finds nothing")
}
