package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestStatsAgreeAcrossReceiversAndRestarts: two receivers on one database
// count into delivery_stat; after one of them restarts, /admin/stats on
// the new process shows both receivers' duplicates and the ledger's
// statuses as the database has them.
func TestStatsAgreeAcrossReceiversAndRestarts(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	env := map[string]string{"ADMIN_TOKEN": adminToken}
	a := startOn(t, db, env, config.RoleAll)
	b := startOn(t, db, env, config.RoleHTTP)
	now := time.Now()
	body := subEvent("evt_two_receivers", "active", now.Unix())
	for i, s := range []*server{a, b, a, b} {
		code, out := s.post(t, "/webhooks/stripe", body, signed(body, now))
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, map[bool]string{true: "claimed", false: "duplicate"}[i == 0], out["status"])
	}
	code, _ := b.post(t, "/webhooks/stripe", body, http.Header{"Stripe-Signature": {"t=1,v1=00"}})
	require.Equal(t, http.StatusUnauthorized, code)
	a.waitSettled(t, "evt_two_receivers")

	require.NoError(t, a.stop(), "a stopping receiver flushes its counts")
	a = startOn(t, db, env, config.RoleAll)

	var out map[string]any
	dbtest.Eventually(t, func() bool {
		code, out, _ = a.admin(t, "GET", "/admin/stats", bearer(adminToken))
		dups, _ := out["duplicates"].(map[string]any)
		return code == http.StatusOK && dups != nil && dups["stripe"].(map[string]any)["last_hour"] == 3.0
	}, "the other receiver's counts arrive within its flush interval: %v", out)
	require.Equal(t, map[string]any{"last_hour": 3.0, "last_day": 3.0}, out["duplicates"].(map[string]any)["stripe"])
	require.Equal(t, map[string]any{"claimed": 0.0, "processing": 0.0, "settled": 1.0, "failed": 0.0, "discarded": 0.0}, out["by_status"])
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`))

	require.NoError(t, b.stop())
	for outcome, want := range map[string]int{"claimed": 1, "duplicate": 3, "invalid_signature": 1} {
		require.Equal(t, want, db.Count(t, `SELECT COALESCE(sum(count), 0) FROM delivery_stat WHERE source = 'stripe' AND outcome = $1`, outcome), outcome)
	}
}
