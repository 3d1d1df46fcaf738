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

// startWorker starts River with one worker (and o's timeout and logger,
// if set): it fetches one job at a time, the oldest, and the others wait
// beside it.
func startWorker(t *testing.T, h *ledgertest.Harness, o ledger.RiverOptions) {
	t.Helper()
	o.Workers, o.Registry, o.Metrics = 1, h.Registry, h.Metrics
	if o.Logger == nil {
		o.Logger = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	}
	client, err := ledger.NewRiver(h.DB.SQL, h.DB.Listener(t), o)
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

	startWorker(t, h, ledger.RiverOptions{})
	for _, id := range []string{"evt_a1", "evt_a2", "evt_b1", "evt_b2", "evt_b3", "evt_c1", "evt_d1"} {
		h.WaitSettled(t, "stripe", id)
	}
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM (SELECT event_id FROM applied GROUP BY event_id HAVING count(*) <> 1) x`), "each event applied once")
	require.Equal(t, 7, h.DB.Count(t, `SELECT count(*) FROM applied`))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(DISTINCT txid) FROM applied WHERE event_id <> 'evt_d1'`), "the claims' events in one transaction")
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(DISTINCT txid) FROM applied`), "the requeue's job in one of its own")
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND state <> 'completed'`) == 0
	}, "every job completed")
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND attempted_by IS NULL AND attempt = 1 AND finalized_at IS NOT NULL`),
		"two jobs absorbed, never fetched by River")
	for _, id := range []string{"evt_b2", "evt_c1"} {
		job, err := store(h).FindJob(context.Background(), "stripe", id)
		require.NoError(t, err)
		require.Equal(t, "completed", job.State, id)
	}
	require.Equal(t, 1, h.Row(t, "stripe", "evt_b2").Attempts)
}

// TestAbsorbedEventFailureSplits: an event of an absorbed job fails the
// transaction; nothing it applied stays. The split runs in jobs of their
// own the absorbing job's events and those of the job that held the
// failing one; the failing event's own job records its permanent failure,
// on it alone. The other absorbed job waits again, and runs whole.
func TestAbsorbedEventFailureSplits(t *testing.T) {
	t.Parallel()
	h := absorbHarness(t)
	insertBatch(t, h, "invoice.paid", "evt_a1", "evt_a2")
	insertBatch(t, h, "invoice.paid", "evt_bad", "evt_b2")
	require.True(t, h.Claim(t, "stripe", "evt_c1", "invoice.paid", []byte(`{}`)))

	startWorker(t, h, ledger.RiverOptions{})
	for _, id := range []string{"evt_a1", "evt_a2", "evt_b2", "evt_c1"} {
		h.WaitSettled(t, "stripe", id)
	}
	dbtest.Eventually(t, func() bool { return h.Row(t, "stripe", "evt_bad").Status == "failed" }, "the poison event failed")
	require.Equal(t, 4, h.DB.Count(t, `SELECT count(*) FROM applied`), "each good event applied once")
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM (SELECT event_id FROM applied GROUP BY event_id HAVING count(*) <> 1) x`))
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id <> 'evt_bad' AND (failures <> 0 OR last_error IS NOT NULL)`),
		"no failure recorded on the others")
	require.Equal(t, 1, h.Row(t, "stripe", "evt_bad").Attempts)
	require.Equal(t, 4, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event' AND NOT args ? 'fresh'`),
		"a job of its own for the absorbing job's events and the failing job's")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE args->>'event_id' = 'evt_c1' AND attempted_by IS NOT NULL`),
		"the other absorbed job ran whole, fetched by River")
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE (kind = 'apply_batch' OR args ? 'fresh') AND state <> 'completed'`))
	dbtest.Eventually(t, func() bool {
		job, err := store(h).FindJob(context.Background(), "stripe", "evt_bad")
		require.NoError(t, err)
		return job != nil && job.State == "cancelled"
	}, "the poison event's own job ends")
}

// TestAbsorbCountsEvents: a job absorbs the waiting jobs whose events fit,
// in order, in its transaction's budget of 256 events, however few events
// it has itself; a job that does not fit is left to run on its own.
func TestAbsorbCountsEvents(t *testing.T) {
	t.Parallel()
	h := absorbHarness(t)
	require.True(t, h.Claim(t, "stripe", "evt_first", "invoice.paid", []byte(`{}`)))
	for b := range 3 {
		ids := make([]string, 120)
		for i := range ids {
			ids[i] = fmt.Sprintf("evt_%d_%03d", b, i)
		}
		insertBatch(t, h, "invoice.paid", ids...)
	}
	startWorker(t, h, ledger.RiverOptions{})
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`) == 361
	}, "every event settled")
	require.Equal(t, 361, h.DB.Count(t, `SELECT count(*) FROM applied`))
	require.Equal(t, 241, h.DB.Count(t, `SELECT count(*) FROM applied WHERE txid = (SELECT txid FROM applied WHERE event_id = 'evt_first')`),
		"the first job took the two batches that fit")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(DISTINCT txid) FROM applied WHERE event_id LIKE 'evt_2_%'`))
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(DISTINCT txid) FROM applied`))
}

// TestRequeueOfAJobBeingAbsorbed: a requeue that finds the event's waiting
// job locked (an apply absorbing it, or River fetching it) answers pending
// at once, instead of waiting for that apply while holding the event's row,
// which the apply needs next.
func TestRequeueOfAJobBeingAbsorbed(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	insertBatch(t, h, "invoice.paid", "evt_held")
	_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET status = 'failed', failures = 2, last_error = 'boom' WHERE event_id = 'evt_held'`)
	require.NoError(t, err)
	held, err := h.DB.SQL.Begin()
	require.NoError(t, err)
	defer held.Rollback() //nolint:errcheck // the test's lock only
	_, err = held.Exec(`SELECT id FROM river_job WHERE args->'events' @> '[{"event_id": "evt_held"}]' FOR UPDATE`)
	require.NoError(t, err)
	// Far longer than a NOWAIT answer takes; a requeue that waited for
	// the lock would end here instead of after the whole patience.
	ctx, cancel := context.WithTimeout(context.Background(), dbtest.Patience/4)
	defer cancel()
	res, err := store(h).Requeue(ctx, "stripe", "evt_held", false)
	require.NoError(t, err)
	require.Equal(t, ledger.RequeuePending, res)
	row := h.Row(t, "stripe", "evt_held")
	require.Equal(t, "failed", row.Status, "the requeue's own change rolled back")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_held' AND failures = 2 AND last_error = 'boom'`))
}

// TestAbsorbReachesPastJobsItCannotAbsorb: behind many jobs it cannot
// absorb (a bulk requeue's), an apply still finds the claims' jobs that
// wait, and leaves the others to run alone.
func TestAbsorbReachesPastJobsItCannotAbsorb(t *testing.T) {
	t.Parallel()
	h := absorbHarness(t)
	insertBatch(t, h, "invoice.paid", "evt_head1", "evt_head2")
	for i := range 130 {
		require.True(t, h.Claim(t, "stripe", fmt.Sprintf("evt_requeued_%03d", i), "invoice.paid", []byte(`{}`)))
	}
	_, err := h.DB.SQL.Exec(`UPDATE river_job SET args = args - 'fresh' WHERE kind = 'apply_event'`)
	require.NoError(t, err)
	insertBatch(t, h, "invoice.paid", "evt_tail1", "evt_tail2")

	startWorker(t, h, ledger.RiverOptions{})
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`) == 134
	}, "every event settled")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(DISTINCT txid) FROM applied WHERE event_id LIKE 'evt_head%' OR event_id LIKE 'evt_tail%'`),
		"the first job absorbed the last")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND attempted_by IS NULL`), "only the last job was absorbed")
	require.Equal(t, 131, h.DB.Count(t, `SELECT count(DISTINCT txid) FROM applied`), "the requeue's jobs ran alone")
}

// TestAbsorbedTimeoutRecordsNothing: a transaction that held other jobs'
// events runs out of time while some event is running, no matter which:
// the timeout is recorded on no event, and every event runs at once in a
// job of its own, within its own time.
func TestAbsorbedTimeoutRecordsNothing(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(ctx context.Context, _ *ledger.Tx, _ *ledger.Event) error {
			// Each event's work is a tenth of the timeout; fifteen of them
			// in one transaction are more than all of it.
			select {
			case <-time.After(200 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	})
	ids := make([]string, 14)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt_slow_%02d", i)
	}
	require.True(t, h.Claim(t, "stripe", "evt_slow_first", "invoice.paid", []byte(`{}`)))
	insertBatch(t, h, "invoice.paid", ids...)
	startWorker(t, h, ledger.RiverOptions{ApplyTimeout: 2 * time.Second})
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`) == 15
	}, "every event settled")
	require.Equal(t, 15, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event' AND NOT args ? 'fresh'`),
		"the split gave every event a job of its own")
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event' AND scheduled_at > created_at + interval '500 milliseconds'`),
		"no event was held back as if it had failed")
}

// TestLingerGathersClaimsThatArriveMeanwhile: a claim's job lingers
// before it takes its batch, and the claims committed meanwhile, each
// with a job of its own, apply in its transaction. A job that cannot
// absorb (a requeue's) does not linger.
func TestLingerGathersClaimsThatArriveMeanwhile(t *testing.T) {
	t.Parallel()
	h := absorbHarness(t)
	var (
		lingers   atomic.Int32
		lingering = make(chan struct{}, 1)
		release   = make(chan struct{})
	)
	gate := func(ctx context.Context) {
		lingers.Add(1)
		lingering <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	// An hour: only the gate ends the wait.
	startWorker(t, h, ledger.WithLingerGate(ledger.RiverOptions{ApplyLinger: time.Hour}, gate))
	require.True(t, h.Claim(t, "stripe", "evt_first", "invoice.paid", []byte(`{}`)))
	select {
	case <-lingering:
	case <-time.After(dbtest.Patience):
		t.Fatal("the first claim's job never lingered")
	}
	require.True(t, h.Claim(t, "stripe", "evt_second", "invoice.paid", []byte(`{}`)))
	insertBatch(t, h, "invoice.paid", "evt_third", "evt_fourth")
	close(release)
	for _, id := range []string{"evt_first", "evt_second", "evt_third", "evt_fourth"} {
		h.WaitSettled(t, "stripe", id)
	}
	require.Equal(t, 4, h.DB.Count(t, `SELECT count(*) FROM applied`))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(DISTINCT txid) FROM applied`), "the claims of the linger in one transaction")
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND attempted_by IS NULL AND state = 'completed'`),
		"the later claims' jobs absorbed, never fetched by River")

	// A requeue's job runs alone and at once.
	_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET status = 'failed' WHERE event_id = 'evt_second'`)
	require.NoError(t, err)
	res, err := store(h).Requeue(context.Background(), "stripe", "evt_second", false)
	require.NoError(t, err)
	require.Equal(t, ledger.RequeueRequeued, res)
	h.WaitSettled(t, "stripe", "evt_second")
	require.Equal(t, int32(1), lingers.Load(), "only the claim's job lingered")
}

// TestJobCompletesInTheApply: the apply completes its own job in its
// transaction, before the handlers run, so that the job's end commits
// with the events it applied.
func TestJobCompletesInTheApply(t *testing.T) {
	t.Parallel()
	states := make(chan string, 1)
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
			var state string
			err := tx.QueryRowContext(ctx, `SELECT state FROM river_job WHERE args->>'event_id' = $1`, ev.EventID).Scan(&state)
			states <- state
			return err
		})
	})
	require.True(t, h.Claim(t, "stripe", "evt_own", "invoice.paid", []byte(`{}`)))
	startWorker(t, h, ledger.RiverOptions{})
	h.WaitSettled(t, "stripe", "evt_own")
	require.Equal(t, "completed", <-states, "the job was completed in the apply's transaction")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND state = 'completed' AND finalized_at IS NOT NULL AND attempt = 1`))
}
