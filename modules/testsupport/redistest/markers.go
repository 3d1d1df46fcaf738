package redistest

import (
	"context"
	"database/sql"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Client is a plain client of the Redis at url, for looking at what
// hookledger wrote; it is closed when the test ends.
func Client(t testing.TB, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Markers lists the namespace/id of every short-circuit marker under
// prefix.
func Markers(t testing.TB, rdb *redis.Client, prefix string) []string {
	t.Helper()
	out, err := ScanMarkers(rdb, prefix)
	require.NoError(t, err)
	return out
}

// ScanMarkers lists the namespace/id of every marker under prefix (the
// tests use short ids, whose keys are readable), whatever the ledger
// identity its key carries after the prefix.
func ScanMarkers(rdb *redis.Client, prefix string) ([]string, error) {
	var out []string
	iter := rdb.Scan(context.Background(), 0, prefix+"*", 1000).Iterator()
	for iter.Next(context.Background()) {
		rest := strings.TrimPrefix(iter.Val(), prefix)
		if identity, after, ok := strings.Cut(rest, ":"); ok && identityKey.MatchString(identity) {
			rest = after
		}
		ns, id, _ := strings.Cut(rest, ":")
		out = append(out, ns+"/"+id)
	}
	return out, iter.Err()
}

// identityKey is a ledger identity as marker keys carry it.
var identityKey = regexp.MustCompile(`^[0-9a-f]{32}$`)

// MissingFromLedger returns the markers (namespace/id, as Markers lists
// them) whose event the ledger in db lacks.
func MissingFromLedger(t testing.TB, db *sql.DB, keys []string) []string {
	t.Helper()
	missing, err := LedgerLacks(db, keys)
	require.NoError(t, err)
	return missing
}

// LedgerLacks is MissingFromLedger for a goroutine other than the test's.
func LedgerLacks(db *sql.DB, keys []string) ([]string, error) {
	var missing []string
	rows, err := db.Query(`SELECT k FROM unnest($1::text[]) AS k
		WHERE NOT EXISTS (SELECT 1 FROM webhook_event WHERE namespace || '/' || event_id = k)`, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		missing = append(missing, k)
	}
	return missing, rows.Err()
}
