package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	atlasmigrate "ariga.io/atlas/sql/migrate"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/migrations"
	"github.com/hookledger/hookledger/migrations/schemadiff"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestSchemaMatchesMigrations replays the migration folder on an empty
// database and asks ent for the difference to its schema: there must be
// none, or a migration is missing.
func TestSchemaMatchesMigrations(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".sql" || e.Name() == "atlas.sum" {
			b, err := os.ReadFile(e.Name())
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644))
		}
	}
	migDir, err := schemadiff.Dir(dir)
	require.NoError(t, err)
	db := dbtest.Empty(t)
	err = schemadiff.Diff(context.Background(), db.SQL, migDir, "drift", true)
	if !errorsIsNoPlan(err) {
		written, _ := filepath.Glob(filepath.Join(dir, "*drift*.up.sql"))
		for _, f := range written {
			b, _ := os.ReadFile(f)
			t.Logf("missing migration:\n%s", b)
		}
		t.Fatalf("ent schema and migrations differ (run `go tool task generate`): %v", err)
	}
}

func errorsIsNoPlan(err error) bool { return errors.Is(err, atlasmigrate.ErrNoPlan) }

func TestRiverMigrationsComplete(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".sql" {
			b, err := os.ReadFile(e.Name())
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644))
		}
	}
	n, err := schemadiff.WriteRiver(dir)
	require.NoError(t, err)
	require.Zero(t, n, "River in go.mod has migrations the folder lacks: run `go tool task generate`")
}

func TestUpDownStatus(t *testing.T) {
	t.Parallel()
	db := dbtest.Empty(t)
	ctx := context.Background()
	open := func() *sql.DB { return stdlib.OpenDBFromPool(db.Pool) }

	st, err := migrations.CurrentStatus(open())
	require.NoError(t, err)
	require.Zero(t, st.Version)
	require.False(t, st.Current())

	require.NoError(t, migrations.Up(open()))
	st, err = migrations.CurrentStatus(open())
	require.NoError(t, err)
	require.True(t, st.Current(), "%+v", st)
	checked, err := migrations.Check(ctx, db.SQL)
	require.NoError(t, err)
	require.Equal(t, st, checked)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM information_schema.tables WHERE table_name = 'river_job'`))

	// The schema's tables, indexes and columns with their types and
	// compression: whatever the newest migration made, down undoes it.
	schema := func() string {
		var s string
		require.NoError(t, db.SQL.QueryRowContext(ctx, `SELECT string_agg(x, ',' ORDER BY x) FROM (
			SELECT c.relname || ':' || c.relkind::text AS x FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')
			UNION ALL
			SELECT c.relname || '.' || a.attname || ':' || format_type(a.atttypid, a.atttypmod) || ':' || a.attcompression::text
			FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped) s`).Scan(&s))
		return s
	}
	before := schema()
	require.NoError(t, migrations.Down(open(), false))
	st, err = migrations.CurrentStatus(open())
	require.NoError(t, err)
	require.Less(t, st.Version, st.Latest, "down goes one step")
	require.NotEqual(t, before, schema(), "what the newest migration made is gone")
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM information_schema.tables WHERE table_name = 'webhook_event'`))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM information_schema.tables WHERE table_name = 'river_job'`))

	require.NoError(t, migrations.Down(open(), true))
	require.Zero(t, db.Count(t, `SELECT count(*) FROM information_schema.tables WHERE table_name IN ('river_job','webhook_event')`))

	require.NoError(t, migrations.Up(open()))
	st, err = migrations.CurrentStatus(open())
	require.NoError(t, err)
	require.True(t, st.Current())
}
