package app_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestDuplicateMismatchComparesDigests: a duplicate is compared with the
// digest its event's row kept at the claim, never with the stored body.
// The stored body of one event is replaced by 20 MB sealed under a key no
// longer configured (what reading it would cost, and what no key opens):
// its duplicates are still compared, a different body counted as a
// mismatch and the same body not. With PAYLOAD_KEYS the kept digest is
// keyed, so it does not confirm a guessed body as a plain SHA-256 would.
func TestDuplicateMismatchComparesDigests(t *testing.T) {
	t.Parallel()
	s, logs := startLogged(t, map[string]string{"PAYLOAD_KEYS": base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{5}, 32))})
	event := func(id, status string) []byte {
		return []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"customer.subscription.updated","created":1764000000,"pending_webhooks":1,`+
			`"data":{"object":{"id":"sub_%s","customer":"cus_dg","status":%q,"items":{"data":[{"price":{"id":"price_pro"}}]}}}}`, id, id, status))
	}
	deliver := func(body []byte, want string) {
		t.Helper()
		code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
		require.Equal(t, http.StatusOK, code, "%v", out)
		require.Equal(t, want, out["status"])
	}
	deliver(event("evt_dg_big", "active"), "claimed")
	deliver(event("evt_dg_sentinel", "active"), "claimed")
	s.waitSettled(t, "evt_dg_big")

	var kept string
	require.NoError(t, s.db.SQL.QueryRow(`SELECT body_identity FROM webhook_event WHERE event_id = 'evt_dg_big'`).Scan(&kept))
	plain := sha256.Sum256(event("evt_dg_big", "active"))
	require.NotContains(t, kept, hex.EncodeToString(plain[:]), "the digest is keyed")
	require.False(t, strings.HasPrefix(kept, "sha256:"), kept)

	_, err := s.db.SQL.Exec(`UPDATE webhook_event SET payload = 'sealed:v1:0badc0de:' || repeat('A', 20 << 20) WHERE event_id = 'evt_dg_big'`)
	require.NoError(t, err)

	deliver(event("evt_dg_big", "active"), "duplicate")   // the same body
	deliver(event("evt_dg_big", "canceled"), "duplicate") // another body
	deliver(event("evt_dg_sentinel", "past_due"), "duplicate")
	mismatches := func() []string {
		var ids []string
		for _, e := range logs.FilterMessage(mismatchLogged).All() {
			ids = append(ids, e.ContextMap()["event_id"].(string))
		}
		return ids
	}
	dbtest.Eventually(t, func() bool { return len(mismatches()) == 2 }, "both mismatches compared")
	require.ElementsMatch(t, []string{"evt_dg_big", "evt_dg_sentinel"}, mismatches())
	require.Equal(t, 2.0, s.metricValue(t, `hookledger_duplicate_mismatch_total{source="stripe"}`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_dg_big' AND octet_length(payload) > 20000000`),
		"the stored body is kept")
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE body_identity IS NULL`))
}
