package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestRiverUIActionsCannotStrandAnEvent: events a receiver-only process
// claimed, whose apply jobs are then cancelled or deleted through River
// UI's API or vanish from River's table, are failed with a reason naming
// what River did, or applied, by the sweep of the workers that start
// after; the sweep runs every LEDGER_SWEEP_INTERVAL, and what it found is
// in hookledger_ledger_orphans.
func TestRiverUIActionsCannotStrandAnEvent(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	receiver := startOn(t, db, map[string]string{"ADMIN_TOKEN": adminToken}, config.RoleHTTP)
	now := time.Now()
	for _, id := range []string{"evt_ui_cancel", "evt_ui_delete", "evt_vanished"} {
		body := subEvent(id, "active", now.Unix())
		code, _ := receiver.post(t, "/webhooks/stripe", body, signed(body, now))
		require.Equal(t, http.StatusOK, code)
	}
	jobOf := func(id string) int64 {
		return int64(db.Count(t, `SELECT id FROM river_job WHERE args->>'event_id' = $1`, id))
	}
	riverUI := func(action string, job int64) {
		req, err := http.NewRequest(http.MethodPost, receiver.base+"/riverui/api/jobs/"+action,
			strings.NewReader(fmt.Sprintf(`{"ids":["%d"]}`, job)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Less(t, resp.StatusCode, 300, "River UI %s", action)
	}
	riverUI("cancel", jobOf("evt_ui_cancel"))
	riverUI("delete", jobOf("evt_ui_delete"))
	_, err := db.SQL.Exec(`DELETE FROM river_job WHERE args->>'event_id' = 'evt_vanished'`)
	require.NoError(t, err)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event'`), "only the cancelled job is left")

	worker := startOn(t, db, map[string]string{"LEDGER_SWEEP_INTERVAL": "1s"}, config.RoleWorker)
	receiver.waitSettled(t, "evt_ui_delete")
	receiver.waitSettled(t, "evt_vanished")
	dbtest.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_ui_cancel' AND status = 'failed'
			AND last_error LIKE '%cancelled in River%'`) == 1
	}, "the cancelled event shows on the Failed page with what River did")

	// An orphan made after the start's sweep is found by a later one.
	_, err = db.SQL.Exec(`INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload)
		SELECT namespace, 'evt_orphan_later', provider, source, event_type, payload FROM webhook_event WHERE event_id = 'evt_vanished'`)
	require.NoError(t, err)
	receiver.waitSettled(t, "evt_orphan_later")
	dbtest.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'ledger_sweep' AND state = 'completed'`) >= 3
	}, "the sweep runs every LEDGER_SWEEP_INTERVAL")
	m := worker.metrics(t)
	require.Contains(t, m, `hookledger_ledger_orphans{action="failed"} 1`)
	require.Contains(t, m, `hookledger_ledger_orphans{action="new_job"} 3`)
}

// TestLogOnlyRedeliveryOfADiscardedPoisonEvent: under CLAIM_MODE=log-only,
// a poison event an operator discarded and its provider then delivers
// again is answered duplicate and stays discarded: no job, no snooze, no
// handler run, also once the handler would succeed.
func TestLogOnlyRedeliveryOfADiscardedPoisonEvent(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken, "CLAIM_MODE": "log-only"})
	lift := refuseBrokenPlan(t, s)
	body := discardPlanEvent("evt_lo_poison", "price_broken")
	code, _ := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code)
	parkRetries(t, s, "evt_lo_poison")
	code, out := s.post(t, "/admin/events/evt_lo_poison/discard", discardBody("plan retired"), discardHeaders(bearer(adminToken)))
	require.Equal(t, http.StatusOK, code, "%v", out)
	jobs := s.db.Count(t, `SELECT count(*) FROM river_job WHERE args->>'event_id' = 'evt_lo_poison'`)

	for _, fixed := range []bool{false, true} {
		if fixed {
			lift()
		}
		code, out = s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "duplicate", out["status"])
	}
	require.Equal(t, "discarded", status(t, s, "evt_lo_poison"))
	require.Equal(t, jobs, s.db.Count(t, `SELECT count(*) FROM river_job WHERE args->>'event_id' = 'evt_lo_poison'`), "no job applies it")
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM river_job WHERE args->>'event_id' = 'evt_lo_poison'
		AND state IN ('available', 'scheduled', 'retryable', 'running', 'pending')`))
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM subscription WHERE external_id = 'sub_evt_lo_poison'`), "never applied")
}

// TestALockedCustomerDelaysOnlyItsEvents: while a session holds FOR
// UPDATE on the usage_total rows of 2 of 10 customers, 100 usage events
// spread over all 10 are claimed, and the events of the 8 free customers
// settle while the lock is still held; once it ends, every event settles
// and every total is exact. The claim-to-settle times of the free
// customers' events are logged.
func TestALockedCustomerDelaysOnlyItsEvents(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"STANDARD_WEBHOOK_SECRET": providerSecrets["standard"]})
	send := func(id, customer string, quantity int) {
		body := []byte(fmt.Sprintf(`{"type":"usage.recorded","timestamp":"2026-12-01T00:00:00Z","data":{"customer_id":%q,"metric":"calls","quantity":%d}}`, customer, quantity))
		code, out := s.post(t, "/webhooks/standard", body, standardSigned(t, id, body))
		require.Equal(t, http.StatusOK, code, "%v", out)
	}
	for c := range 10 {
		send(fmt.Sprintf("msg_lock_first_%d", c), fmt.Sprintf("cus_lock_%d", c), 1)
	}
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`) == 10
	}, "the customers' first events settle")
	lock, err := s.db.SQL.Begin()
	require.NoError(t, err)
	defer lock.Rollback() //nolint:errcheck
	_, err = lock.Exec(`SELECT * FROM usage_total WHERE customer_id IN ('cus_lock_0', 'cus_lock_1') FOR UPDATE`)
	require.NoError(t, err)

	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(fmt.Sprintf("msg_lock_%03d", i), fmt.Sprintf("cus_lock_%d", i%10), 2)
		}()
	}
	wg.Wait()
	free := `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'msg_lock_0%' AND status = 'settled'
		AND right(event_id, 1) NOT IN ('0', '1')`
	dbtest.Eventually(t, func() bool { return s.db.Count(t, free) == 80 }, "the free customers' events settle while two are locked")
	require.Equal(t, 20, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'msg_lock_0%' AND status <> 'settled'`),
		"the locked customers' events wait")
	var median, most float64
	require.NoError(t, s.db.SQL.QueryRow(`SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d), max(d) FROM (
		SELECT extract(epoch FROM settled_at - received_at) AS d FROM webhook_event
		WHERE event_id LIKE 'msg_lock_0%' AND right(event_id, 1) NOT IN ('0', '1')) x`).Scan(&median, &most))
	t.Logf("free customers' events, claim to settle: median %.2f s, max %.2f s", median, most)
	require.NoError(t, lock.Rollback())
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`) == 110
	}, "every event settles once the lock ends")
	require.Equal(t, 10, s.db.Count(t, `SELECT count(*) FROM usage_total WHERE customer_id LIKE 'cus_lock_%' AND quantity = 21`), "every total exact")
}
