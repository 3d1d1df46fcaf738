package ledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// pruneRole creates a login role of its own for the test, with what prune
// needs on db's tables and nothing more (no pg_read_all_stats), and
// returns its name and a pool of its sessions on db. The role goes when
// the test ends.
func pruneRole(t *testing.T, db *dbtest.DB) (string, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	role := fmt.Sprintf("hookledger_prune_%016x", rand.Uint64())
	asAdmin(t, dbtest.Admin(t), "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN")
	asAdmin(t, db.URL,
		"GRANT USAGE ON SCHEMA public TO "+pgx.Identifier{role}.Sanitize(),
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "+pgx.Identifier{role}.Sanitize(),
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "+pgx.Identifier{role}.Sanitize())
	pcfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	pcfg.ConnConfig.User, pcfg.ConnConfig.Password, pcfg.MaxConns = role, "", 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	sdb := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() {
		sdb.Close()
		pool.Close()
		asAdmin(t, db.URL, "DROP OWNED BY "+pgx.Identifier{role}.Sanitize())
		asAdmin(t, dbtest.Admin(t), "DROP ROLE "+pgx.Identifier{role}.Sanitize())
	})
	return role, sdb
}

// asAdmin runs statements as the test server's superuser on the database
// of url, on a connection that is closed before it returns.
func asAdmin(t *testing.T, url string, statements ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, s := range statements {
		_, err := conn.Exec(ctx, s)
		require.NoError(t, err, s)
	}
}

// olderSnapshot begins a transaction on db whose snapshot is taken before
// prune keeps any key, as a claim statement that began before it.
func olderSnapshot(t *testing.T, db *sql.DB) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	var n int
	require.NoError(t, tx.QueryRow(`SELECT count(*) FROM webhook_key`).Scan(&n), "the snapshot is taken")
	return tx
}

// pruneWaiting reports whether a prune is waiting for older snapshots, as
// observer (a session that sees the pruner's) reads pg_stat_activity.
func pruneWaiting(t *testing.T, observer *sql.DB) bool {
	t.Helper()
	var n int
	require.NoError(t, observer.QueryRow(`SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE '%age(backend_xmin)%' AND pid <> pg_backend_pid()`).Scan(&n))
	return n > 0
}

// TestPruneRefusesSessionsItCannotSee: prune run as a role that cannot see
// another role's sessions in pg_stat_activity (no pg_read_all_stats)
// cannot wait for their snapshots, so it deletes nothing and says which
// privilege it needs: a claim on a snapshot older than the kept keys
// still finds the row, a duplicate. Granted pg_read_all_stats, the same
// role waits for that snapshot and then prunes.
func TestPruneRefusesSessionsItCannotSee(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*dbtest.Patience)
	defer cancel()
	_, err := h.Claimer.Claim(ctx, claimOf("evt_hidden", "invoice.paid"))
	require.NoError(t, err)
	ageSettled(t, h, "100 days")
	role, pruner := pruneRole(t, h.DB)
	prune := ledger.NewStore(pruner, nil, ledger.StoreOptions{})

	// A session of another role (the harness's) holds an older snapshot.
	old := olderSnapshot(t, h.DB.SQL)
	r, pruneErr := prune.Prune(ctx, ninetyDays, false)
	q, args := ledger.ClaimStatement([]ledger.Claim{claimOf("evt_hidden", "invoice.paid")})
	reclaimed := dbtest.Strings(t, old, `WITH c AS (`+q+`) SELECT event_id FROM c`, args...)
	require.NoError(t, old.Rollback())
	require.Empty(t, reclaimed, "a claim on the older snapshot claimed the pruned event again")
	require.ErrorIs(t, pruneErr, ledger.ErrHiddenSessions)
	require.ErrorContains(t, pruneErr, "pg_read_all_stats")
	require.ErrorContains(t, pruneErr, role)
	require.Zero(t, r.Rows)
	require.Equal(t, []string{"evt_hidden"}, eventIDs(t, h), "nothing is deleted")

	// The hourly job logs the refusal and is cancelled with it, deleting
	// nothing; the next hour's run tries again.
	old = olderSnapshot(t, h.DB.SQL)
	core, logs := observer.New(zap.ErrorLevel)
	w := &ledger.PruneWorker{DB: pruner, Retention: ninetyDays, Logger: zap.New(core)}
	jobErr := w.Work(ctx, &river.Job[ledger.PruneArgs]{JobRow: &rivertype.JobRow{}})
	require.NoError(t, old.Rollback())
	var cancelled *rivertype.JobCancelError
	require.ErrorAs(t, jobErr, &cancelled)
	require.ErrorContains(t, jobErr, "pg_read_all_stats")
	require.Equal(t, 1, logs.FilterMessageSnippet("prune refused").Len())
	require.Equal(t, []string{"evt_hidden"}, eventIDs(t, h), "the job deletes nothing")

	// With pg_read_all_stats it sees every session: it waits for the older
	// snapshot, and prunes once it is gone.
	asAdmin(t, dbtest.Admin(t), "GRANT pg_read_all_stats TO "+pgx.Identifier{role}.Sanitize())
	old = olderSnapshot(t, h.DB.SQL)
	done := make(chan error, 1)
	go func() {
		_, err := prune.Prune(ctx, ninetyDays, false)
		done <- err
	}()
	dbtest.Eventually(t, func() bool { return pruneWaiting(t, h.DB.SQL) }, "prune never waited for the older snapshot")
	require.Equal(t, []string{"evt_hidden"}, eventIDs(t, h), "no row goes while the older snapshot is held")
	require.NoError(t, old.Rollback())
	require.NoError(t, <-done)
	require.Empty(t, eventIDs(t, h))
}

// TestPruneAsTheSameRoleNeedsNoPrivilege: where every session on the
// database is prune's own role, pg_stat_activity shows their snapshots
// without pg_read_all_stats: prune waits for an older one and then
// deletes.
func TestPruneAsTheSameRoleNeedsNoPrivilege(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*dbtest.Patience)
	defer cancel()
	_, pruner := pruneRole(t, db)
	_, err := pruner.Exec(`INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, status, received_at)
		VALUES ('stripe', 'evt_same_role', 'stripe', 'stripe', 'invoice.paid', '{}', 'settled', now() - interval '100 days')`)
	require.NoError(t, err)
	// Only the role's own sessions remain on the database.
	dbtest.Eventually(t, func() bool {
		var others int
		require.NoError(t, pruner.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND usename <> current_user`).Scan(&others))
		return others == 0
	}, "the superuser's sessions never left the test database")

	old := olderSnapshot(t, pruner)
	done := make(chan error, 1)
	go func() {
		_, err := ledger.NewStore(pruner, nil, ledger.StoreOptions{}).Prune(ctx, ninetyDays, false)
		done <- err
	}()
	dbtest.Eventually(t, func() bool { return pruneWaiting(t, pruner) }, "prune never waited for the older snapshot")
	require.Equal(t, []string{"evt_same_role"}, dbtest.Strings(t, pruner, `SELECT event_id FROM webhook_event`))
	require.NoError(t, old.Rollback())
	require.NoError(t, <-done)
	require.Empty(t, dbtest.Strings(t, pruner, `SELECT event_id FROM webhook_event`))
}
