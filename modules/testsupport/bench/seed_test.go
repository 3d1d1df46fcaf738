package bench

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestSeedLedger: a seeded ledger has the rows asked for, a fifth of them
// received in the last day and none before the retention cutoff, every
// status the console shows, rows shaped as the apply leaves them, and a
// valid payload of its own on every row.
func TestSeedLedger(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	const rows = 2000
	now := time.Now()
	_, err := seedLedger(ctx, db.Pool, "../../../testdata/providers", rows, now, t.Logf)
	require.NoError(t, err)

	var total, lastDay, distinctIDs, distinctPayloads, tooOld, sources int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE received_at > $1::timestamptz - interval '24 hours'),
		count(DISTINCT (namespace, event_id)), count(DISTINCT payload), count(*) FILTER (WHERE received_at < $1::timestamptz - interval '90 days'),
		count(DISTINCT source)
		FROM webhook_event`, now).Scan(&total, &lastDay, &distinctIDs, &distinctPayloads, &tooOld, &sources))
	require.Equal(t, rows, total)
	require.InDelta(t, 0.2, float64(lastDay)/rows, 0.01, "share received in the last day")
	require.Equal(t, rows, distinctIDs)
	require.Equal(t, rows, distinctPayloads, "every row's payload is its own")
	require.Zero(t, tooOld, "rows older than the default retention")
	require.Equal(t, 3, sources)

	byStatus := map[string]int{}
	statuses, err := db.Pool.Query(ctx, `SELECT status, count(*) FROM webhook_event GROUP BY status`)
	require.NoError(t, err)
	for statuses.Next() {
		var s string
		var n int
		require.NoError(t, statuses.Scan(&s, &n))
		byStatus[s] = n
	}
	require.NoError(t, statuses.Err())
	require.Equal(t, rows/seedFailedEvery, byStatus["failed"])
	require.Equal(t, seedClaimed(rows), byStatus["claimed"])
	require.Equal(t, 1, byStatus["discarded"])
	require.Equal(t, rows-byStatus["failed"]-byStatus["claimed"]-byStatus["discarded"], byStatus["settled"])

	// Rows as the apply leaves them: settled once with their module,
	// failed ones with their error and failure log, claimed ones the
	// newest and never applied.
	var badSettled, badFailed, badClaimed, staleClaimed, noDigest int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE status = 'settled' AND (settled_at IS NULL OR settled_at < received_at OR attempts <> 1
			OR jsonb_array_length(handlers) <> 1 OR last_error IS NOT NULL OR failure_log IS NOT NULL)),
		count(*) FILTER (WHERE status = 'failed' AND (settled_at IS NOT NULL OR last_error IS NULL OR failures <> $1
			OR attempts <> $1 OR jsonb_array_length(failure_log) <> $1 OR failure_log->-1->>'error' <> last_error OR failing_since IS NULL)),
		count(*) FILTER (WHERE status = 'claimed' AND (attempts <> 0 OR handlers IS NOT NULL)),
		count(*) FILTER (WHERE status = 'claimed' AND received_at < (SELECT max(received_at) FROM webhook_event WHERE status <> 'claimed')),
		count(*) FILTER (WHERE provider = 'github' AND body_digest IS NULL)
		FROM webhook_event`, seedFailures).Scan(&badSettled, &badFailed, &badClaimed, &staleClaimed, &noDigest))
	require.Zero(t, badSettled, "settled rows unlike an applied one")
	require.Zero(t, badFailed, "failed rows without their error and failure log")
	require.Zero(t, badClaimed, "claimed rows that were applied")
	require.Zero(t, staleClaimed, "claimed rows that are not the newest")
	require.Zero(t, noDigest, "GitHub rows without a body digest")

	// Every payload is JSON, and a Stripe event carries its own id.
	payloads, err := db.Pool.Query(ctx, `SELECT provider, event_id, payload FROM webhook_event`)
	require.NoError(t, err)
	defer payloads.Close()
	for payloads.Next() {
		var provider, id, payload string
		require.NoError(t, payloads.Scan(&provider, &id, &payload))
		var body struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal([]byte(payload), &body), "payload of %s", id)
		if provider == "stripe" {
			require.Equal(t, id, body.ID)
		}
	}
	require.NoError(t, payloads.Err())
}
