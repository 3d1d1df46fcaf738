package app_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/config"
)

// TestDiscardAndRequeueWithoutPayloadKeys: on a ledger that a server
// sealed with PAYLOAD_KEYS, an operator holding only DATABASE_URL discards
// and requeues events from the CLI, and the admin API of a process without
// the keys does the same, and so do the console's buttons: neither changes a payload, so neither opens one,
// and the payloads stay as sealed. events show prints the rest of the row
// and says that the payload needs PAYLOAD_KEYS.
func TestDiscardAndRequeueWithoutPayloadKeys(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{5}, 32))
	s := start(t, map[string]string{"PAYLOAD_KEYS": key})
	lift := refuseBrokenPlan(t, s)
	discardFailingEvent(t, s, "evt_nokey_cli")
	discardFailingEvent(t, s, "evt_nokey_api")
	discardFailingEvent(t, s, "evt_nokey_console")
	sealed := func() []string {
		var out []string
		rows, err := s.db.SQL.Query(`SELECT payload FROM webhook_event WHERE event_id LIKE 'evt_nokey_%' ORDER BY event_id`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var p string
			require.NoError(t, rows.Scan(&p))
			require.Regexp(t, `^sealed:v1:`, p)
			out = append(out, p)
		}
		require.NoError(t, rows.Err())
		return out
	}
	before := sealed()
	require.Len(t, before, 3)
	t.Setenv("DATABASE_URL", s.db.URL)
	t.Setenv("PAYLOAD_KEYS", "")

	code, stdout, stderr := run("events", "discard", "evt_nokey_cli", "--reason", "poison")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "stripe/evt_nokey_cli: discarded (reason: poison)\n", stdout)
	require.Equal(t, "discarded", status(t, s, "evt_nokey_cli"))

	// show prints the row and its job, and says why the payload is not
	// there.
	code, stdout, stderr = run("events", "show", "evt_nokey_cli")
	require.Equal(t, 0, code, stderr)
	var shown struct {
		Event        map[string]any `json:"event"`
		Job          map[string]any `json:"job"`
		PayloadError string         `json:"payload_error"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &shown), stdout)
	require.Equal(t, "discarded", shown.Event["status"])
	require.Equal(t, "poison", shown.Event["discard_reason"])
	require.NotEmpty(t, shown.Event["failures"])
	require.NotContains(t, shown.Event, "payload")
	require.Equal(t, "cancelled", shown.Job["state"])
	require.Contains(t, shown.PayloadError, "PAYLOAD_KEYS")
	require.Contains(t, stderr, "PAYLOAD_KEYS")

	// The admin API and the console of a process without the keys.
	api := startOn(t, s.db, map[string]string{"ADMIN_TOKEN": adminToken}, config.RoleHTTP)
	auth := discardHeaders(bearer(adminToken))
	code, out := api.post(t, "/admin/events/evt_nokey_api/discard", discardBody("poison"), auth)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, "discarded", out["status"])
	require.Equal(t, "poison", out["discard_reason"])
	require.NotContains(t, out, "payload", "this process cannot open it")
	require.Equal(t, "discarded", status(t, s, "evt_nokey_api"))
	form := url.Values{"namespace": {"stripe"}, "id": {"evt_nokey_console"}, "reason": {"poison"}}
	code, body := consolePost(t, api, "/console/event/discard", form)
	require.Equal(t, http.StatusSeeOther, code, body)
	require.Equal(t, "discarded", status(t, s, "evt_nokey_console"))

	// Fixed: both come back, and the server, which holds the keys,
	// applies them.
	lift()
	code, stdout, stderr = run("events", "requeue", "evt_nokey_cli")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "stripe/evt_nokey_cli: requeued\n", stdout)
	code, out = api.post(t, "/admin/events/evt_nokey_api/requeue", nil, auth)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, 1.0, out["requeued"])
	code, body = consolePost(t, api, "/console/event/requeue", url.Values{"namespace": {"stripe"}, "id": {"evt_nokey_console"}})
	require.Equal(t, http.StatusSeeOther, code, body)
	s.waitSettled(t, "evt_nokey_cli")
	s.waitSettled(t, "evt_nokey_api")
	s.waitSettled(t, "evt_nokey_console")
	require.Equal(t, 3, s.db.Count(t, `SELECT count(*) FROM subscription WHERE plan = 'price_broken'`))
	require.Equal(t, before, sealed(), "the payloads are as the server sealed them")
}
