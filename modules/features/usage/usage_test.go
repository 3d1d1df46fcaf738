package usage_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/migrations"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/features/usage"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

func setup(t *testing.T, workers int) *ledgertest.Harness {
	t.Helper()
	return ledgertest.New(t, workers, func(h *ledgertest.Harness) { usage.Register(h.Registry) })
}

func recorded(customer, metric string, qty int) []byte {
	return []byte(fmt.Sprintf(`{"type":"usage.recorded","timestamp":"2026-12-01T00:00:00Z","data":{"customer_id":%q,"metric":%q,"quantity":%d}}`, customer, metric, qty))
}

func total(t *testing.T, h *ledgertest.Harness, customer, metric string) int {
	t.Helper()
	return h.DB.Count(t, `SELECT COALESCE(sum(quantity), 0) FROM usage_total WHERE customer_id = $1 AND metric = $2`, customer, metric)
}

// TestLedgerStopsDoubleCounting: a delta has no version, so only the ledger
// stands between a retried delivery and a doubled count.
func TestLedgerStopsDoubleCounting(t *testing.T) {
	t.Parallel()
	h := setup(t, 0)
	body := recorded("cus_1", "api_calls", 5)
	require.True(t, h.Claim(t, "standard", "msg_1", "usage.recorded", body))
	require.NoError(t, h.Apply(t, "standard", "msg_1", false))
	require.Equal(t, 5, total(t, h, "cus_1", "api_calls"))

	require.False(t, h.Claim(t, "standard", "msg_1", "usage.recorded", body), "the retry is a duplicate")
	require.NoError(t, h.Apply(t, "standard", "msg_1", false), "a second job for it changes nothing")
	require.Equal(t, 5, total(t, h, "cus_1", "api_calls"))

	// Applying it again on purpose (log-only, requeue --force) replaces
	// the event's delta: it does not add it again.
	require.NoError(t, h.Apply(t, "standard", "msg_1", true))
	require.Equal(t, 5, total(t, h, "cus_1", "api_calls"))
}

// TestForcedReapplyMovesToTheFixedTotal: a handler fix that makes an event
// read another total moves its delta there.
func TestForcedReapplyMovesToTheFixedTotal(t *testing.T) {
	t.Parallel()
	h := setup(t, 0)
	require.True(t, h.Claim(t, "standard", "msg_m", "usage.recorded", recorded("cus_m", "api_calls", 4)))
	require.NoError(t, h.Apply(t, "standard", "msg_m", false))
	_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET payload = $1 WHERE event_id = 'msg_m'`, recorded("cus_m", "api_requests", 6))
	require.NoError(t, err)
	require.NoError(t, h.Apply(t, "standard", "msg_m", true))
	require.Equal(t, 0, total(t, h, "cus_m", "api_calls"))
	require.Equal(t, 6, total(t, h, "cus_m", "api_requests"))
}

// TestNamespacesKeepTheirOwnTotals: two senders that use the same customer
// ids feed totals of their own.
func TestNamespacesKeepTheirOwnTotals(t *testing.T) {
	t.Parallel()
	h := setup(t, 0)
	ctx := context.Background()
	for _, ns := range []string{"standard", "partner"} {
		_, err := h.Claimer.Claim(ctx, ledger.Claim{Namespace: ns, EventID: "msg_same", Provider: "standard", Source: ns,
			Type: "usage.recorded", Payload: recorded("cus_n", "api_calls", 3)})
		require.NoError(t, err)
		require.NoError(t, h.Apply(t, ns, "msg_same", false))
	}
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM usage_total WHERE customer_id = 'cus_n'`))
	require.Equal(t, 3, h.DB.Count(t, `SELECT quantity FROM usage_total WHERE namespace = 'partner' AND customer_id = 'cus_n'`))
}

func TestDuplicateStormWithWorkers(t *testing.T) {
	t.Parallel()
	h := setup(t, 4)
	var wg sync.WaitGroup
	for i := range 5 {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.Claim(t, "standard", fmt.Sprintf("msg_%d", i), "usage.recorded", recorded("cus_2", "seats", i+1))
			}()
		}
	}
	wg.Wait()
	for i := range 5 {
		h.WaitSettled(t, "standard", fmt.Sprintf("msg_%d", i))
	}
	require.Equal(t, 1+2+3+4+5, total(t, h, "cus_2", "seats"))
}

func TestPoisonUsage(t *testing.T) {
	t.Parallel()
	h := setup(t, 0)
	err := h.Deliver(t, "standard", "msg_bad", "usage.recorded", []byte(`{"type":"usage.recorded","data":{"quantity":1}}`))
	require.Error(t, err)
}

// TestForcedReapplyReplacesItsDelta: a forced re-apply (requeue --force
// after a handler fix) replaces the event's earlier effect instead of adding
// it again.
func TestForcedReapplyReplacesItsDelta(t *testing.T) {
	t.Parallel()
	h := setup(t, 0)
	require.True(t, h.Claim(t, "standard", "msg_f", "usage.recorded", recorded("cus_f", "api_calls", 7)))
	require.NoError(t, h.Apply(t, "standard", "msg_f", false))
	require.True(t, h.Claim(t, "standard", "msg_g", "usage.recorded", recorded("cus_f", "api_calls", 3)))
	require.NoError(t, h.Apply(t, "standard", "msg_g", false))
	require.Equal(t, 10, total(t, h, "cus_f", "api_calls"))
	require.NoError(t, h.Apply(t, "standard", "msg_f", true))
	require.NoError(t, h.Apply(t, "standard", "msg_f", true))
	require.Equal(t, 10, total(t, h, "cus_f", "api_calls"), "forced twice, counted once")
}

// TestBatchTakesTotalsInKeyOrder: an apply of many usage events writes
// their totals in key order, whatever the order of its events, so two
// applies that share totals take their row locks in one order and cannot
// deadlock; each total moves by the sum of its events.
func TestBatchTakesTotalsInKeyOrder(t *testing.T) {
	t.Parallel()
	h := setup(t, 1)
	_, err := h.DB.SQL.Exec(`
		CREATE TABLE total_order (n serial, customer_id text);
		CREATE FUNCTION log_total() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO total_order (customer_id) VALUES (NEW.customer_id); RETURN NEW; END $$;
		CREATE TRIGGER log_total BEFORE INSERT ON usage_total FOR EACH ROW EXECUTE FUNCTION log_total()`)
	require.NoError(t, err)
	// The ledger applies m1 to m4 in that order; their customers run the
	// other way, and cus_b has two of them.
	keys := h.InsertBatch(t, "standard",
		ledgertest.BatchEvent{ID: "m1", Type: "usage.recorded", Payload: recorded("cus_c", "api_calls", 1)},
		ledgertest.BatchEvent{ID: "m2", Type: "usage.recorded", Payload: recorded("cus_b", "api_calls", 2)},
		ledgertest.BatchEvent{ID: "m3", Type: "usage.recorded", Payload: recorded("cus_a", "api_calls", 3)},
		ledgertest.BatchEvent{ID: "m4", Type: "usage.recorded", Payload: recorded("cus_b", "api_calls", 4)})
	for _, k := range keys {
		h.WaitSettled(t, k.Namespace, k.EventID)
	}
	require.Equal(t, []string{"cus_a", "cus_b", "cus_c"},
		dbtest.Strings(t, h.DB.SQL, `SELECT customer_id FROM total_order ORDER BY n`))
	require.Equal(t, 3, total(t, h, "cus_a", "api_calls"))
	require.Equal(t, 6, total(t, h, "cus_b", "api_calls"))
	require.Equal(t, 1, total(t, h, "cus_c", "api_calls"))
	require.Equal(t, 4, h.DB.Count(t, `SELECT count(*) FROM usage_delta`))
}

// TestUpgradeKeepsEarlierDeltas: a usage event applied before usage_delta
// existed is not added again by a forced re-apply after the upgrade.
func TestUpgradeKeepsEarlierDeltas(t *testing.T) {
	t.Parallel()
	db := dbtest.Empty(t)
	open := func() *sql.DB { return stdlib.OpenDBFromPool(db.Pool) }
	// The schema before usage_delta, with one applied usage event.
	require.NoError(t, migrations.UpTo(open(), 20261201095742))
	_, err := db.SQL.Exec(`
		INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, status, attempts, received_at, settled_at)
		VALUES ('standard', 'msg_old', 'standard', 'standard', 'usage.recorded', $1, 'settled', 1, now(), now())`,
		string(recorded("cus_up", "api_calls", 5)))
	require.NoError(t, err)
	_, err = db.SQL.Exec(`INSERT INTO usage_total (customer_id, metric, quantity, updated_at) VALUES ('cus_up', 'api_calls', 5, now())`)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(open()))

	reg := ledger.NewRegistry()
	usage.Register(reg)
	ctx := context.Background()
	require.NoError(t, ledger.InTx(ctx, db.SQL, func(tx *ledger.Tx) error {
		_, _, err := ledger.Apply(ctx, tx, reg, ledger.ApplyArgs{Namespace: "standard", EventID: "msg_old", Force: true})
		return err
	}))
	require.Equal(t, 5, db.Count(t, `SELECT quantity FROM usage_total WHERE customer_id = 'cus_up'`), "re-applied, not added again")
}

// TestVerbatimUsage: a sender that publishes its data verbatim (Hookdeck
// Outpost: the body is {"customer_id","metric","quantity"}, the type comes
// from webhook-topic) is counted as the envelope is, and the two shapes
// feed one total.
func TestVerbatimUsage(t *testing.T) {
	t.Parallel()
	h := setup(t, 0)
	require.NoError(t, h.Deliver(t, "standard", "msg_v1", "usage.recorded",
		[]byte(`{"customer_id":"cus_v","metric":"api_calls","quantity":4}`)))
	require.NoError(t, h.Deliver(t, "standard", "msg_v2", "usage.recorded", recorded("cus_v", "api_calls", 3)))
	require.Equal(t, 7, total(t, h, "cus_v", "api_calls"))
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM usage_delta WHERE customer_id = 'cus_v'`))
}

// TestUsageOfNeitherShape: a body that is neither the envelope nor the
// verbatim data fails for good (no retry), and its failure says what the module reads.
func TestUsageOfNeitherShape(t *testing.T) {
	t.Parallel()
	h := setup(t, 0)
	for id, body := range map[string]string{
		"msg_n1": `{"type":"usage.recorded","data":{"quantity":1}}`,
		"msg_n2": `{"customer":"cus_n","count":2}`,
		"msg_n3": `{"customer_id":"cus_n","quantity":2}`,
	} {
		err := h.Deliver(t, "standard", id, "usage.recorded", []byte(body))
		require.Error(t, err, body)
		require.ErrorContains(t, err, `{"type","timestamp","data":{"customer_id","metric","quantity"}}`, body)
		require.ErrorContains(t, err, `verbatim {"customer_id","metric","quantity"}`, body)
		require.True(t, ledger.IsPermanent(err), "no retry can fix %s", body)
	}
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM usage_total`))
}
