package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// store is the ledger of h, on its River client.
func store(h *ledgertest.Harness) *ledger.Store {
	return ledger.NewStore(h.DB.SQL, h.River, ledger.StoreOptions{})
}

func TestPruneOnlyOldSettledRows(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	for i, c := range []struct{ status, age string }{
		{"settled", "100 days"}, {"settled", "95 days"}, {"settled", "1 day"},
		{"failed", "100 days"}, {"claimed", "100 days"},
	} {
		id := fmt.Sprintf("evt_%d", i)
		h.Claim(t, "stripe", id, "invoice.paid", []byte(`{}`))
		_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET status = $1, received_at = now() - $2::interval WHERE event_id = $3`, c.status, c.age, id)
		require.NoError(t, err)
	}
	r, err := store(h).Prune(ctx, ledger.Retention{Rows: 90 * 24 * time.Hour}, true)
	require.NoError(t, err)
	require.Equal(t, int64(2), r.Rows)
	require.Equal(t, 5, h.DB.Count(t, `SELECT count(*) FROM webhook_event`), "dry run deletes nothing")

	r, err = store(h).Prune(ctx, ledger.Retention{Rows: 90 * 24 * time.Hour}, false)
	require.NoError(t, err)
	require.Equal(t, int64(2), r.Rows)
	require.ElementsMatch(t, []string{"evt_2", "evt_3", "evt_4"}, eventIDs(t, h))
}

func TestPruneInBatches(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	_, err := h.DB.SQL.Exec(`
		INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, status, received_at)
		SELECT 'stripe', 'evt_' || g, 'stripe', 'stripe', 'x', '{}', 'settled', now() - interval '200 days'
		FROM generate_series(1, $1::int) g`, ledger.PruneBatch*2+5)
	require.NoError(t, err)
	r, err := store(h).Prune(context.Background(), ledger.Retention{Rows: 90 * 24 * time.Hour}, false)
	require.NoError(t, err)
	require.Equal(t, int64(ledger.PruneBatch*2+5), r.Rows)
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event`))
}

func eventIDs(t *testing.T, h *ledgertest.Harness) []string {
	return dbtest.Strings(t, h.DB.SQL, `SELECT event_id FROM webhook_event`)
}

// TestGivesUpWhenRiverDoesAndRequeues: a handler that keeps failing is
// retried by River until the job's attempts are spent; River then discards
// the job, the row stays failed with the reason, and a requeue brings
// River's job back with a whole budget of its own.
func TestGivesUpWhenRiverDoesAndRequeues(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(context.Context, *ledger.Tx, *ledger.Event) error {
			if fail.Load() {
				return errors.New("card network down")
			}
			return nil
		})
	})
	h.Claim(t, "stripe", "evt_d", "invoice.paid", []byte(`{}`))
	// A budget of two attempts, the second due at once.
	_, err := h.DB.SQL.Exec(`UPDATE river_job SET max_attempts = 2`)
	require.NoError(t, err)
	client, err := ledger.NewRiver(h.DB.SQL, h.DB.Listener(t), ledger.RiverOptions{
		Workers: 2, Registry: h.Registry, Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)), Metrics: h.Metrics,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { cancel(); <-client.Stopped() })

	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND state = 'discarded'`) == 1
	})
	row := h.Row(t, "stripe", "evt_d")
	require.Equal(t, "failed", row.Status)
	require.Equal(t, 2, row.Attempts)
	require.Contains(t, row.LastError.String, "gave up after 2 attempts")
	require.Contains(t, row.LastError.String, "card network down")
	require.Equal(t, 2, h.DB.Count(t, `SELECT cardinality(errors) FROM river_job WHERE kind <> 'ledger_sweep'`), "River keeps both errors")

	fail.Store(false)
	res, err := ledger.NewStore(h.DB.SQL, client, ledger.StoreOptions{}).Requeue(ctx, "stripe", "evt_d", false)
	require.NoError(t, err)
	require.Equal(t, ledger.RequeueRequeued, res)
	h.WaitSettled(t, "stripe", "evt_d")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep'`), "River's own job ran again: never a second one")
	require.Equal(t, 3, h.Row(t, "stripe", "evt_d").Attempts)
	require.Equal(t, ledger.ApplyMaxAttempts, h.DB.Count(t, `SELECT max_attempts FROM river_job WHERE kind <> 'ledger_sweep'`), "a requeue gives the job a whole budget again")
	require.Equal(t, 1, h.DB.Count(t, `SELECT attempt FROM river_job WHERE kind <> 'ledger_sweep'`), "counted from attempt 0 again")
}

func TestRequeueInsertsWhenRiverPrunedTheJob(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	h.Claim(t, "stripe", "evt_old", "invoice.paid", []byte(`{}`))
	_, err := h.DB.SQL.Exec(`DELETE FROM river_job; UPDATE webhook_event SET status = 'failed'`)
	require.NoError(t, err)
	res, err := store(h).Requeue(context.Background(), "stripe", "evt_old", false)
	require.NoError(t, err)
	require.Equal(t, ledger.RequeueRequeued, res)
	require.Equal(t, "claimed", h.Row(t, "stripe", "evt_old").Status)
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND state = 'available'`))

	_, err = store(h).Requeue(context.Background(), "stripe", "evt_missing", false)
	require.ErrorIs(t, err, ledger.ErrNotFound)
}

func TestRequeueLeavesARunningJobAlone(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	h.Claim(t, "stripe", "evt_run", "invoice.paid", []byte(`{}`))
	_, err := h.DB.SQL.Exec(`UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(); UPDATE webhook_event SET status = 'failed'`)
	require.NoError(t, err)
	res, err := store(h).Requeue(context.Background(), "stripe", "evt_run", false)
	require.NoError(t, err)
	require.Equal(t, ledger.RequeuePending, res)
	require.Equal(t, "failed", h.Row(t, "stripe", "evt_run").Status)
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep'`), "never a second job beside a live one")
}

// TestPruneJobWithRetentionOffIsCancelled: a prune job left from a run
// with RETENTION set is cancelled by a process with it off, deleting
// nothing (a zero retention must never mean every settled row).
func TestPruneJobWithRetentionOffIsCancelled(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 1, nil)
	ctx := context.Background()
	h.Claim(t, "stripe", "evt_old", "invoice.paid", []byte(`{}`))
	_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET status = 'settled', received_at = now() - interval '400 days'`)
	require.NoError(t, err)
	_, err = h.DB.SQL.Exec(`DELETE FROM river_job`)
	require.NoError(t, err)
	res, err := h.River.Insert(ctx, ledger.PruneArgs{}, nil)
	require.NoError(t, err)
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND id = $1 AND state = 'cancelled'`, res.Job.ID) == 1
	})
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event`), "nothing pruned")
}
