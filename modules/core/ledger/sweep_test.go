package ledger_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// jobOf is the id of the newest apply job carrying the stripe event id.
func jobOf(t *testing.T, h *ledgertest.Harness, id string) int64 {
	t.Helper()
	job, err := store(h).FindJob(context.Background(), "stripe", id)
	require.NoError(t, err)
	require.NotNil(t, job, "%s has a job", id)
	return job.ID
}

// TestSweepDealsWithEveryOrphan: claimed events whose apply job River
// cancelled (River UI's Cancel), discarded (the rescuer gave up after its
// crash rescues) or deleted (River UI's Delete) are orphans: the sweep
// fails the first two with a reason naming what River did, gives the last
// a new job, leaves every other row alone, and reports exactly that; a
// second sweep finds nothing.
func TestSweepDealsWithEveryOrphan(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	for _, id := range []string{"evt_cancelled", "evt_rescued", "evt_deleted", "evt_fine"} {
		h.Claim(t, "stripe", id, "invoice.paid", []byte(`{}`))
	}
	batch := insertBatch(t, h, "invoice.paid", "evt_batch_a", "evt_batch_b")
	_, err := h.River.JobCancel(ctx, jobOf(t, h, "evt_cancelled"))
	require.NoError(t, err)
	_, err = h.River.JobCancel(ctx, jobOf(t, h, batch[0].EventID))
	require.NoError(t, err)
	_, err = h.DB.SQL.Exec(`UPDATE river_job SET state = 'discarded', attempt = 84, finalized_at = now() WHERE id = $1`, jobOf(t, h, "evt_rescued"))
	require.NoError(t, err)
	_, err = h.River.JobDelete(ctx, jobOf(t, h, "evt_deleted"))
	require.NoError(t, err)
	// A row an apply holds right now is left to that apply.
	h.Claim(t, "stripe", "evt_held", "invoice.paid", []byte(`{}`))
	_, err = h.River.JobDelete(ctx, jobOf(t, h, "evt_held"))
	require.NoError(t, err)
	held, err := h.DB.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = held.Exec(`SELECT 1 FROM webhook_event WHERE event_id = 'evt_held' FOR UPDATE`)
	require.NoError(t, err)

	r, err := ledger.Sweep(ctx, h.DB.SQL, h.River)
	require.NoError(t, err)
	require.Equal(t, ledger.SweepReport{NewJobs: 1, Failed: 4}, r)
	require.NoError(t, held.Rollback())

	row := h.Row(t, "stripe", "evt_cancelled")
	require.Equal(t, "failed", row.Status)
	require.Contains(t, row.LastError.String, "cancelled in River")
	require.Equal(t, 0, row.Attempts, "no handler ran")
	row = h.Row(t, "stripe", "evt_rescued")
	require.Equal(t, "failed", row.Status)
	require.Contains(t, row.LastError.String, "River gave up on apply job")
	require.Contains(t, row.LastError.String, "after 84 attempts")
	for _, k := range batch {
		require.Equal(t, "failed", h.Row(t, "stripe", k.EventID).Status)
	}
	require.Equal(t, "claimed", h.Row(t, "stripe", "evt_deleted").Status)
	require.Equal(t, 1, liveJobs(t, h, "evt_deleted"), "a new job")
	require.Equal(t, "claimed", h.Row(t, "stripe", "evt_fine").Status)
	require.Equal(t, 1, liveJobs(t, h, "evt_fine"), "its own job, untouched")

	r, err = ledger.Sweep(ctx, h.DB.SQL, h.River)
	require.NoError(t, err)
	require.Equal(t, ledger.SweepReport{NewJobs: 1}, r, "only the row that was held")
	r, err = ledger.Sweep(ctx, h.DB.SQL, h.River)
	require.NoError(t, err)
	require.Zero(t, r)

	startWorker(t, h, ledger.RiverOptions{})
	for _, id := range []string{"evt_deleted", "evt_held", "evt_fine"} {
		h.WaitSettled(t, "stripe", id)
	}
}
