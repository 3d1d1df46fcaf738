package ledger_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestClaimInsertsTheJobRiverWould: the claim's one statement inserts the
// apply job River's InsertManyTx inserts for the same claims, column by
// column (an apply_event job for one event, an apply_batch job for more,
// none for duplicates only), and wakes the workers with River's notice.
func TestClaimInsertsTheJobRiverWould(t *testing.T) {
	t.Parallel()
	f := setup(t, 0, nil)
	ctx := context.Background()

	listener, err := pgx.Connect(ctx, f.db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { listener.Close(context.Background()) })
	_, err = listener.Exec(ctx, `LISTEN "public.river_insert"`)
	require.NoError(t, err)

	viaRiver := ledger.NewStore(f.db.SQL, f.River, ledger.StoreOptions{})
	ledger.JobsThroughRiver(viaRiver)
	claim := func(ns, id string) ledger.Claim {
		c := claimOf(id, "invoice.paid")
		c.Namespace = ns
		return c
	}
	for _, path := range []struct {
		ns    string
		store *ledger.Store
	}{{"statement", f.claimer}, {"river", viaRiver}} {
		res, err := ledger.ClaimBatch(ctx, path.store, []ledger.Claim{claim(path.ns, "evt_1")})
		require.NoError(t, err)
		require.Equal(t, []ledger.ClaimResult{ledger.Claimed}, res)
		if path.ns == "statement" {
			waitCtx, cancel := context.WithTimeout(ctx, dbtest.Patience)
			n, err := listener.WaitForNotification(waitCtx)
			cancel()
			require.NoError(t, err, "the claim wakes the workers")
			require.Equal(t, `{"queue": "default"}`, n.Payload)
		}
		// A batch: two new events, one of them twice, and one the ledger
		// holds.
		res, err = ledger.ClaimBatch(ctx, path.store, []ledger.Claim{
			claim(path.ns, "evt_3"), claim(path.ns, "evt_2"), claim(path.ns, "evt_1"), claim(path.ns, "evt_3")})
		require.NoError(t, err)
		require.Equal(t, []ledger.ClaimResult{ledger.Claimed, ledger.Claimed, ledger.Duplicate, ledger.Duplicate}, res)
		// Duplicates only: no job.
		res, err = ledger.ClaimBatch(ctx, path.store, []ledger.Claim{claim(path.ns, "evt_2"), claim(path.ns, "evt_1")})
		require.NoError(t, err)
		require.Equal(t, []ledger.ClaimResult{ledger.Duplicate, ledger.Duplicate}, res)
	}

	type job struct {
		columns string
		args    []byte
	}
	jobs := map[string][]job{}
	rows, err := f.db.SQL.Query(`
		SELECT to_jsonb(j) - 'id' - 'args' - 'created_at' - 'scheduled_at', args,
			coalesce(args->>'namespace', args->'events'->0->>'namespace'), scheduled_at = created_at
		FROM river_job j ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var (
			j       job
			ns      string
			created bool
		)
		require.NoError(t, rows.Scan(&j.columns, &j.args, &ns, &created))
		require.True(t, created, "scheduled when created")
		jobs[ns] = append(jobs[ns], j)
	}
	require.NoError(t, rows.Err())
	require.Len(t, jobs["statement"], 2)
	require.Len(t, jobs["river"], 2)
	for i := range 2 {
		require.JSONEq(t, jobs["river"][i].columns, jobs["statement"][i].columns, "job %d", i)
	}

	var one ledger.ApplyArgs
	require.NoError(t, json.Unmarshal(jobs["statement"][0].args, &one))
	require.Equal(t, ledger.ApplyArgs{Namespace: "statement", EventID: "evt_1", Fresh: true}, one)
	for ns, list := range jobs {
		var batch ledger.ApplyBatchArgs
		require.NoError(t, json.Unmarshal(list[1].args, &batch))
		require.ElementsMatch(t, []ledger.EventKey{{Namespace: ns, EventID: "evt_2"}, {Namespace: ns, EventID: "evt_3"}}, batch.Events)
	}
}

// TestClaimInALongNamedSchema: where River's notice channel would be
// longer than PostgreSQL's 63 bytes (a schema named with more than 50),
// which pg_notify refuses, the claim sends no notice and still claims.
func TestClaimInALongNamedSchema(t *testing.T) {
	t.Parallel()
	f := setup(t, 0, nil)
	schema := strings.Repeat("s", 51)
	_, err := f.db.SQL.Exec(`CREATE SCHEMA ` + schema)
	require.NoError(t, err)
	sep := "?"
	if strings.Contains(f.db.URL, "?") {
		sep = "&"
	}
	db, err := sql.Open("pgx", f.db.URL+sep+"search_path="+schema+",public")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	var current string
	require.NoError(t, db.QueryRow(`SELECT current_schema()`).Scan(&current))
	require.Equal(t, schema, current)

	store := ledger.NewStore(db, f.River, ledger.StoreOptions{})
	for _, id := range []string{"evt_long_1", "evt_long_2"} {
		res, err := store.Claim(context.Background(), claimOf(id, "invoice.paid"))
		require.NoError(t, err)
		require.Equal(t, ledger.Claimed, res)
	}
	require.Equal(t, 2, f.db.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep'`))
}

// TestClaimOutlivesAChangeOfTheLedgersColumns: the claim's statement is
// prepared once per connection. A migration that changes a type it
// returns makes PostgreSQL refuse the prepared statement once; the claim
// then forgets it, and the next claim on the same connection prepares it
// again and succeeds.
func TestClaimOutlivesAChangeOfTheLedgersColumns(t *testing.T) {
	t.Parallel()
	f := setup(t, 0, nil)
	ctx := context.Background()
	db, err := sql.Open("pgx", f.db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	store := ledger.NewStore(db, f.River, ledger.StoreOptions{})
	backend := func() (pid int) {
		require.NoError(t, db.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid))
		return pid
	}

	res, err := ledger.ClaimBatch(ctx, store, []ledger.Claim{claimOf("evt_1", "invoice.paid")})
	require.NoError(t, err)
	require.Equal(t, []ledger.ClaimResult{ledger.Claimed}, res)
	pid := backend()

	_, err = f.db.SQL.Exec(`ALTER TABLE webhook_event ALTER COLUMN event_id TYPE text`)
	require.NoError(t, err)
	_, err = ledger.ClaimBatch(ctx, store, []ledger.Claim{claimOf("evt_2", "invoice.paid")})
	require.ErrorContains(t, err, "cached plan must not change result type")
	res, err = ledger.ClaimBatch(ctx, store, []ledger.Claim{claimOf("evt_3", "invoice.paid")})
	require.NoError(t, err)
	require.Equal(t, []ledger.ClaimResult{ledger.Claimed}, res)
	require.Equal(t, pid, backend(), "one connection throughout")
	require.Equal(t, []string{"evt_1", "evt_3"},
		dbtest.Strings(t, f.db.SQL, `SELECT event_id FROM webhook_event ORDER BY event_id`))
}
