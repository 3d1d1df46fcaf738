package app_test

import (
	"slices"
	"strings"
	"testing"

	"entgo.io/ent/dialect/sql/schema"
	"github.com/stretchr/testify/require"

	entmigrate "github.com/hookledger/hookledger/ent/migrate"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// ledgerTables are the ledger's own tables, keyed by what the ledger
// keys them by (a source, a minute), and operationsTables the operations
// modules' records, keyed by what they are about (an alert): every other
// table of an ent schema is a module's business table.
var (
	ledgerTables     = []string{"webhook_event", "webhook_key", "delivery_stat", "ledger_identity", "replay_watermark", "erased_subject"}
	operationsTables = []string{"alert_state"}
)

// TestBusinessKeysStartWithNamespace: in the migrated schema, every
// unique index of every business table (each ent schema's table but the
// ledger's own; River's and golang-migrate's tables are not ent's) starts
// with namespace, so that a second source's events (its own namespace)
// never change the first source's rows.
func TestBusinessKeysStartWithNamespace(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	rows, err := db.SQL.Query(`
		SELECT t.relname, i.relname, COALESCE(a.attname, '')
		FROM pg_index x
		JOIN pg_class i ON i.oid = x.indexrelid
		JOIN pg_class t ON t.oid = x.indrelid
		JOIN pg_namespace n ON n.oid = t.relnamespace
		LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = x.indkey[0]
		WHERE n.nspname = current_schema() AND x.indisunique AND NOT x.indisprimary`)
	require.NoError(t, err)
	defer rows.Close()
	first := map[string]map[string]string{} // table -> unique index -> its first column
	for rows.Next() {
		var table, index, column string
		require.NoError(t, rows.Scan(&table, &index, &column))
		if first[table] == nil {
			first[table] = map[string]string{}
		}
		first[table][index] = column
	}
	require.NoError(t, rows.Err())

	business := 0
	for _, table := range entmigrate.Tables {
		if slices.Contains(ledgerTables, table.Name) || slices.Contains(operationsTables, table.Name) {
			continue
		}
		business++
		require.True(t, slices.ContainsFunc(table.Columns, func(c *schema.Column) bool { return c.Name == "namespace" }),
			"business table %s has a namespace column", table.Name)
		require.NotEmpty(t, first[table.Name], "business table %s has a unique key", table.Name)
		for index, column := range first[table.Name] {
			require.Equal(t, "namespace", column, "unique index %s of %s starts with namespace", index, table.Name)
		}
	}
	require.GreaterOrEqual(t, business, 5, "the business tables were found")
	for _, table := range append(slices.Clone(ledgerTables), operationsTables...) {
		require.True(t, slices.ContainsFunc(entmigrate.Tables, func(tb *schema.Table) bool { return tb.Name == table }), "ledger or operations table %s exists", table)
	}
	for table := range first {
		require.True(t, strings.HasPrefix(table, "river_") || table == "schema_migrations" ||
			slices.ContainsFunc(entmigrate.Tables, func(tb *schema.Table) bool { return tb.Name == table }),
			"table %s is an ent schema's, River's or golang-migrate's", table)
	}
}
