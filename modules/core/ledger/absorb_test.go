package ledger_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// absorbHarness is a ledger whose handler of invoice.paid writes, in the
// apply's transaction, the event's id and the transaction's id, and fails
// for evt_bad with a permanent error. Nothing works its jobs until
// startWorker: the test first lays out the jobs that wait.
func absorbHarness(t *testing.T) *ledgertest.Harness {
	t.Helper()
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
			if ev.EventID == "evt_bad" {
				return ledger.Permanent(errors.New("poison"))
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO applied (event_id, txid) VALUES ($1, txid_current())`, ev.EventID)
			return err
		})
	})
	_, err := h.DB.SQL.Exec(`CREATE TABLE applied (event_id text NOT NULL, txid bigint NOT NULL)`)
	require.NoError(t, err)
	return h
}

// startWorker starts River with one worker: it fetches one job at a time,
// the oldest, and the others wait beside it.
func startWorker(t *testing.T, h *ledgertest.Harness) {
	t.Helper()
	client, err := ledger.NewRiver(h.DB.SQL, h.DB.Listener(t), ledger.RiverOptions{
		Workers: 1, Registry: h.Registry, Metrics: h.Metrics, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		cancel()
		<-client.Stopped()
	})
}

// TestApplyAbsorbsWaitingClaimJobs: the job River hands the worker takes
// the claims' jobs waiting beside it (batches, and an event claimed
// alone) into its transaction, applies every event once, and completes
// them; a job that is not a claim's (a requeue's) is left to run alone.
func TestApplyAbsorbsWaitingClaimJobs(t *testing.T) {
	t.Parallel()
	h := absorbHarness(t)
	insertBatch(t, h, "invoice.paid", "evt_a1", "evt_a2")
	insertBatch(t, h, "invoice.paid", "evt_b1", "evt_b2", "evt_b3")
	require.True(t, h.Claim(t, "stripe", "evt_c1", "invoice.paid", []byte(`{}`)))
	require.True(t, h.Claim(t, "stripe", "evt_d1", "invoice.paid", []byte(`{}`)))
	_, err := h.DB.SQL.Exec(`UPDATE river_job SET args = args - 'fresh' WHERE args->>'event_id' = 'evt_d1'`)
	require.NoError(t, err)
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE args @> '{"fresh": true}'`), "a claim of one event marks its job")

	startWorker(t, h)
	for _, id := range []string{"evt_a1", "evt_a2", "evt_b1", "evt_b2", "evt_b3", "evt_c1", "evt_d1"} {
		h.WaitSettled(t, "stripe", id)
	}
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM (SELECT event_id FROM applied GROUP BY event_id HAVING count(*) <> 1) x`), "each event applied once")
	require.Equal(t, 7, h.DB.Count(t, `SELECT count(*) FROM applied`))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(DISTINCT txid) FROM applied WHERE event_id <> 'evt_d1'`), "the claims' events in one transaction")
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(DISTINCT txid) FROM applied`), "the requeue's job in one of its own")
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM river_job WHERE state <> 'completed'`) == 0
	}, "every job completed")
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE attempted_by IS NULL AND attempt = 1 AND finalized_at IS NOT NULL`),
		"two jobs absorbed, never fetched by River")
	for _, id := range []string{"evt_b2", "evt_c1"} {
		job, err := store(h).FindJob(context.Background(), "stripe", id)
		require.NoError(t, err)
		require.Equal(t, "completed", job.State, id)
	}
	require.Equal(t, 1, h.Row(t, "stripe", "evt_b2").Attempts)
}

// TestAbsorbedEventFailureSplits: an event of an absorbed job fails the
// transaction; nothing it applied stays, and the failure goes the way of a
// batch's: every event, the absorbing job's and the absorbed jobs', runs in
// a job of its own, the failing one's failure is recorded on it alone, and
// the others settle once.
func TestAbsorbedEventFailureSplits(t *testing.T) {
	t.Parallel()
	h := absorbHarness(t)
	insertBatch(t, h, "invoice.paid", "evt_a1", "evt_a2")
	insertBatch(t, h, "invoice.paid", "evt_bad", "evt_b2")
	require.True(t, h.Claim(t, "stripe", "evt_c1", "invoice.paid", []byte(`{}`)))

	startWorker(t, h)
	for _, id := range []string{"evt_a1", "evt_a2", "evt_b2", "evt_c1"} {
		h.WaitSettled(t, "stripe", id)
	}
	dbtest.Eventually(t, func() bool { return h.Row(t, "stripe", "evt_bad").Status == "failed" }, "the poison event failed")
	require.Equal(t, 4, h.DB.Count(t, `SELECT count(*) FROM applied`), "each good event applied once")
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM (SELECT event_id FROM applied GROUP BY event_id HAVING count(*) <> 1) x`))
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id <> 'evt_bad' AND (failures <> 0 OR last_error IS NOT NULL)`),
		"no failure recorded on the others")
	require.Equal(t, 1, h.Row(t, "stripe", "evt_bad").Attempts)
	require.Equal(t, 5, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event' AND NOT args ? 'fresh'`), "a job of its own for every event")
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE (kind = 'apply_batch' OR args ? 'fresh') AND state <> 'completed'`),
		"the absorbed jobs were taken back and completed by the split")
	dbtest.Eventually(t, func() bool {
		job, err := store(h).FindJob(context.Background(), "stripe", "evt_bad")
		require.NoError(t, err)
		return job != nil && job.State == "cancelled"
	}, "the poison event's own job ends")
}
