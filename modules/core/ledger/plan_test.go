package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestLockPlanIgnoresStaleStats: the apply's lock statement, forced or
// not, must find its rows by index however small the ledger was when the
// connection first ran it. Its plan is cached (applyPlanSQL), and a new
// ledger is small: a generic plan costed then scanned the whole table for
// every batch for as long as the connection lived, so the apply grew
// dearer with every event claimed.
func TestLockPlanIgnoresStaleStats(t *testing.T) {
	t.Parallel()
	for _, force := range []bool{false, true} {
		t.Run(fmt.Sprintf("force=%t", force), func(t *testing.T) {
			t.Parallel()
			lockPlanIgnoresStaleStats(t, force)
		})
	}
}

func lockPlanIgnoresStaleStats(t *testing.T, force bool) {
	ctx := context.Background()
	db := dbtest.New(t)
	// One connection, so that every apply reuses its statement cache; no
	// autovacuum, whose ANALYZE would replace the cached plan by chance.
	conn, err := db.SQL.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `ALTER TABLE webhook_event SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	insert := func(from, to int) {
		t.Helper()
		_, err := conn.ExecContext(ctx, `
			INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload)
			SELECT 'stripe', 'evt_plan_' || g, 'stripe', 'stripe', 'customer.updated', '{}'
			FROM generate_series($1::int, $2::int) g`, from, to)
		require.NoError(t, err)
	}
	reg := ledger.NewRegistry()
	// seqScans applies one event on conn and returns the sequential scans
	// of webhook_event that apply made.
	seqScans := func(i int) int {
		t.Helper()
		tx, err := conn.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		// The view counts what this backend has not yet reported, which can
		// include earlier transactions: the difference is this apply's.
		scans := func() int {
			var n int
			require.NoError(t, tx.QueryRowContext(ctx, `SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'webhook_event'`).Scan(&n))
			return n
		}
		before := scans()
		_, outcome, err := ledger.Apply(ctx, ledger.WrapTx(tx), reg, ledger.ApplyArgs{Namespace: "stripe", EventID: fmt.Sprintf("evt_plan_%d", i), Force: force})
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeUnhandled, outcome)
		n := scans() - before
		require.NoError(t, tx.Commit())
		return n
	}
	insert(1, 10)
	for i := 1; i <= 10; i++ {
		seqScans(i)
	}
	insert(11, 20000)
	require.Zero(t, seqScans(15000), "the lock statement scanned the ledger instead of using its key")
}

// TestLockReachesRowsByKeyAmongManyPending: with a backlog of claimed
// rows, the apply's lock statement reaches its events by key. Its
// lifecycle guard names the pending statuses the partial index of claimed
// and failed rows is made of: a planner that took the guard for that
// index's predicate walked every pending row for each batch (23 ms a
// batch with 3,000 pending, growing with the backlog).
func TestLockReachesRowsByKeyAmongManyPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)
	// The statistics of a new ledger (no pending row), as the apply's
	// cached plans were costed, and then a backlog (no autovacuum).
	_, err := db.SQL.ExecContext(ctx, `ALTER TABLE webhook_event SET (autovacuum_enabled = false);
		INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, status)
		SELECT 'stripe', 'evt_settled_' || g, 'stripe', 'stripe', 'customer.updated', '{}', 'settled' FROM generate_series(1, 100) g;
		ANALYZE webhook_event;
		INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload)
		SELECT 'stripe', 'evt_pending_' || g, 'stripe', 'stripe', 'customer.updated', '{}' FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	reg := ledger.NewRegistry()
	for _, force := range []bool{false, true} {
		tx, err := db.SQL.BeginTx(ctx, nil)
		require.NoError(t, err)
		fetched := func() int {
			var n int
			require.NoError(t, tx.QueryRowContext(ctx, `SELECT COALESCE(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables WHERE relname = 'webhook_event'`).Scan(&n))
			return n
		}
		before := fetched()
		_, _, err = ledger.Apply(ctx, ledger.WrapTx(tx), reg, ledger.ApplyArgs{Namespace: "stripe", EventID: "evt_pending_777", Force: force})
		require.NoError(t, err)
		require.Less(t, fetched()-before, 100, "force=%t: the lock statement walked the pending rows instead of using its key", force)
		require.NoError(t, tx.Rollback())
	}
}
