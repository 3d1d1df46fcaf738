package ledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// countsHarness is a ledger whose handler of usage.recorded adds one to
// its customer's row of stall_total through a staged Write, and whose
// Flush waits for wait (when set) before it writes.
func countsHarness(t *testing.T, wait chan struct{}) *ledgertest.Harness {
	t.Helper()
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) {
		total := ledger.NewWrite(h.Registry, ledger.WriteFuncs[string, int]{
			Merge: func(a, b int) int { return a + b },
			Flush: func(ctx context.Context, tx *ledger.Tx, entries []ledger.Entry[string, int]) error {
				if wait != nil {
					<-wait // ignores its context, as a hung call would
				}
				for _, e := range entries {
					if _, err := tx.ExecContext(ctx, `UPDATE stall_total SET n = n + $2 WHERE customer = $1`, e.Key, e.Value); err != nil {
						return err
					}
				}
				return nil
			},
		})
		h.Registry.Handle("stripe", "usage.recorded", func(_ context.Context, tx *ledger.Tx, ev *ledger.Event) error {
			var body struct{ Customer string }
			if err := json.Unmarshal(ev.Payload, &body); err != nil {
				return ledger.Permanent(err)
			}
			total.Put(tx, body.Customer, 1)
			return nil
		})
	})
	_, err := h.DB.SQL.Exec(`CREATE TABLE stall_total (customer text PRIMARY KEY, n int NOT NULL);
		INSERT INTO stall_total SELECT 'cus_' || g, 0 FROM generate_series(0, 9) g`)
	require.NoError(t, err)
	return h
}

// TestALockedRowDelaysOnlyItsEvents: while another session holds the
// business rows of two customers (a long report, a migration), the events
// of the other eight settle: the batch that meets the lock gives way
// (ApplyLockTimeout) and splits, and only the locked customers' events
// wait, in jobs of their own, not counted as attempts; once the lock
// goes, they settle too, each applied once.
func TestALockedRowDelaysOnlyItsEvents(t *testing.T) {
	t.Parallel()
	h := countsHarness(t, nil)
	ctx := context.Background()
	lock, err := h.DB.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer lock.Rollback() //nolint:errcheck
	_, err = lock.Exec(`SELECT * FROM stall_total WHERE customer IN ('cus_0', 'cus_1') FOR UPDATE`)
	require.NoError(t, err)

	var events []ledgertest.BatchEvent
	for i := range 30 {
		events = append(events, ledgertest.BatchEvent{ID: fmt.Sprintf("evt_%02d", i), Type: "usage.recorded",
			Payload: fmt.Appendf(nil, `{"customer":"cus_%d"}`, i%10)})
	}
	h.InsertBatch(t, "stripe", events...)
	// The apply's own time is far beyond the test's patience: only the
	// lock timeout can free the batch.
	startWorker(t, h, ledger.RiverOptions{ApplyTimeout: time.Hour})
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`) == 24
	}, "the free customers' events settle while two customers are locked")
	require.Equal(t, 6, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'claimed' AND attempts = 0`),
		"the locked customers' events wait, not counted as attempts")
	require.NoError(t, lock.Rollback())
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`) == 30
	}, "and settle once the lock goes")
	require.Equal(t, 10, h.DB.Count(t, `SELECT count(*) FROM stall_total WHERE n = 3`), "each event applied once")
}

// TestAFlushOutOfTimeNamesItsWrite: a staged write still running when the
// apply's time ends fails the event with the Write's name, as a handler's
// failure names the handler.
func TestAFlushOutOfTimeNamesItsWrite(t *testing.T) {
	t.Parallel()
	wait := make(chan struct{})
	defer close(wait)
	h := countsHarness(t, wait)
	h.Claim(t, "stripe", "evt_hung", "usage.recorded", []byte(`{"customer":"cus_3"}`))
	startWorker(t, h, ledger.RiverOptions{ApplyTimeout: time.Second})
	row := waitRow(t, h, "evt_hung", "failed", func(r ledgertest.Row) bool { return r.Status == "failed" })
	require.Contains(t, row.LastError.String, "ledger_test.Flush: ")
	log := failureLog(t, h, "evt_hung")
	require.Equal(t, "ledger_test.Flush", log[0].Handler)
}
