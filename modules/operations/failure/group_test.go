package failure_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/operations/failure"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// setup returns the failure groups of a fresh ledger, acted on through a
// real Store on an insert-only River client, and a row factory.
func setup(t *testing.T) (*failure.Groups, *dbtest.DB, func(id, source, status, lastError string)) {
	t.Helper()
	db := dbtest.New(t)
	jobs, err := ledger.NewRiver(db.SQL, nil, ledger.RiverOptions{Registry: ledger.NewRegistry(), Logger: zap.NewNop(), Metrics: metrics.New()})
	require.NoError(t, err)
	store := ledger.NewStore(db.SQL, jobs, ledger.StoreOptions{})
	add := func(id, source, status, lastError string) {
		_, err := db.SQL.Exec(`INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, status, attempts, last_error,
				failures, failing_since, failure_log)
			VALUES ('stripe', $1, 'stripe', $2, 'invoice.paid', '{}', $3, 1, NULLIF($4, ''), 1, now() - interval '1 hour',
				jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'error', $4::text)))`, id, source, status, lastError)
		require.NoError(t, err)
	}
	return failure.New(db.SQL, store), db, add
}

// TestGroupsOfFailedEvents: failed events of one cause with different ids
// make one group with its count, times and sample; other causes, sources
// and settled events are apart; requeue and discard act on exactly the
// group's events through the ledger, reporting each.
func TestGroupsOfFailedEvents(t *testing.T) {
	t.Parallel()
	groups, db, add := setup(t)
	ctx := context.Background()
	for i := range 5 {
		add(fmt.Sprintf("evt_poison_%d", i), "stripe", "failed", fmt.Sprintf(`invoice.applyStripe: customer cus_%d%d has no account "acct_%d"`, i, i, i))
	}
	add("evt_other_source", "stripe-eu", "failed", `invoice.applyStripe: customer cus_9 has no account "acct_9"`)
	add("evt_other_cause", "stripe", "failed", `invoice.applyStripe: connection refused`)
	add("evt_settled", "stripe", "settled", ``)

	r, err := groups.List(ctx)
	require.NoError(t, err)
	require.Equal(t, 7, r.Failed)
	require.False(t, r.Truncated)
	require.Len(t, r.Groups, 3)
	g := r.Groups[0]
	require.Equal(t, 5, g.Count)
	require.Equal(t, "stripe", g.Source)
	require.Equal(t, "invoice.applyStripe", g.Handler)
	require.Equal(t, `customer <id> has no account "…"`, g.Error)
	require.Contains(t, g.SampleEventID, "evt_poison_")
	require.Equal(t, "stripe", g.SampleNamespace)
	require.True(t, g.FirstFailedAt.Before(g.LastFailedAt), "first failed an hour before the last")
	require.Nil(t, g.NextRetryAt, "no River job waits")
	for _, o := range r.Groups[1:] {
		require.Equal(t, 1, o.Count)
		require.NotEqual(t, g.ID, o.ID)
	}

	// The id is stable: read again, the same.
	again, err := groups.List(ctx)
	require.NoError(t, err)
	require.Equal(t, g.ID, again.Groups[0].ID)

	_, _, err = groups.Find(ctx, "0000000000000000")
	require.ErrorIs(t, err, failure.ErrUnknownGroup)

	found, keys, err := groups.Find(ctx, g.ID)
	require.NoError(t, err)
	require.Equal(t, 5, found.Count)
	require.Len(t, keys, 5)

	_, err = groups.Discard(ctx, g.ID, keys, "  ")
	require.ErrorIs(t, err, ledger.ErrNoReason)
	require.Equal(t, 7, db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'failed'`))

	// One of them settles meanwhile: skipped with the ledger's reason.
	_, err = db.SQL.Exec(`UPDATE webhook_event SET status = 'settled', settled_at = now() WHERE event_id = 'evt_poison_0'`)
	require.NoError(t, err)
	res, err := groups.Discard(ctx, g.ID, keys, "customer deleted")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"discarded": 4, "skipped": 1}, res.Counts)
	require.Len(t, res.Events, 5)
	require.Equal(t, 4, db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'discarded' AND discard_reason = 'customer deleted' AND event_id LIKE 'evt_poison_%'`))
	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'failed'`), "the other groups are left")
	_, _, err = groups.Find(ctx, g.ID)
	require.ErrorIs(t, err, failure.ErrUnknownGroup, "the group is gone")

	other := r.Groups[1]
	_, keys, err = groups.Find(ctx, other.ID)
	require.NoError(t, err)
	res, err = groups.Requeue(ctx, other.ID, keys)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"requeued": 1}, res.Counts)
	require.Equal(t, other.SampleEventID, res.Events[0].EventID)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'claimed' AND event_id = $1`, other.SampleEventID))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event' AND args->>'event_id' = $1`, other.SampleEventID),
		"the requeue gave it a job")
}

// TestFailedRowsReadThroughThePartialIndex: the scan of failed rows is an
// index scan of the partial index on claimed and failed rows, its range
// starting at the cursor, on a ledger of mostly settled rows.
func TestFailedRowsReadThroughThePartialIndex(t *testing.T) {
	t.Parallel()
	_, db, _ := setup(t)
	_, err := db.SQL.Exec(`INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, status, attempts, received_at, last_error)
		SELECT 'stripe', 'evt_' || g, 'stripe', 'stripe', 'invoice.paid', '{}', CASE WHEN g % 1000 = 0 THEN 'failed' ELSE 'settled' END, 1,
			now() - g * interval '1 second', CASE WHEN g % 1000 = 0 THEN 'invoice.applyStripe: boom' END
		FROM generate_series(1, 50000) g`)
	require.NoError(t, err)
	_, err = db.SQL.Exec(`ANALYZE webhook_event`)
	require.NoError(t, err)
	plan := strings.Join(dbtest.Strings(t, db.SQL, `EXPLAIN `+failure.FailedSQL, time.Now().Add(-time.Hour), int64(0), 2000), "\n")
	require.Contains(t, plan, "webhookevent_pending", plan)
	require.Regexp(t, `Index Cond: .*received_at >=`, plan, "the range starts at the cursor")
}
