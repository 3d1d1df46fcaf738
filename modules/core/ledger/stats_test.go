package ledger_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestBacklogUsesThePartialIndex: the backlog every /metrics scrape, the
// admin stats and the console read goes through the partial index on
// claimed and failed rows, not a scan of the ledger; counting processing
// too would lose the index, which is why no query counts it.
func TestBacklogUsesThePartialIndex(t *testing.T) {
	db := dbtest.New(t)
	_, err := db.SQL.Exec(`
		INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, status, received_at)
		SELECT 'stripe', 'evt_' || g, 'stripe', 'stripe', 'x', '{}',
			CASE WHEN g % 2000 = 0 THEN 'failed' WHEN g % 1000 = 0 THEN 'claimed' ELSE 'settled' END,
			now() - g * interval '1 second'
		FROM generate_series(1, 20000) g;
		ANALYZE webhook_event`)
	require.NoError(t, err)
	plan := func(query string) string {
		var p string
		require.NoError(t, db.SQL.QueryRow(`EXPLAIN (FORMAT JSON) `+query).Scan(&p))
		return p
	}

	p := plan(ledger.BacklogQuery)
	require.Contains(t, p, `"Index Name": "webhookevent_pending"`, p)
	require.Contains(t, p, `"Index Name": "webhookevent_failing_since"`, p, "the oldest failure is a probe of the failed rows' own index")
	require.NotContains(t, p, `"Seq Scan"`, p)

	// The oldest failure is the failed row that started failing first,
	// whenever it was received; a claimed row failing its retries counts
	// once it is failed.
	_, err = db.SQL.Exec(`
		UPDATE webhook_event SET failing_since = now() - interval '1 minute' WHERE status = 'failed';
		UPDATE webhook_event SET failing_since = now() - interval '2 hours' WHERE event_id = 'evt_2000';
		UPDATE webhook_event SET failing_since = now() - interval '5 hours' WHERE event_id = 'evt_1000'`)
	require.NoError(t, err)
	store := ledger.NewStore(db.SQL, nil, ledger.StoreOptions{})
	before := time.Now()
	b, err := store.Backlog(context.Background())
	require.NoError(t, err)
	require.GreaterOrEqual(t, b.OldestFailed, 2*time.Hour)
	require.Less(t, b.OldestFailed, 2*time.Hour+time.Since(before)+time.Second, "evt_1000 is claimed, not failed")
	_, err = db.SQL.Exec(`UPDATE webhook_event SET status = 'settled' WHERE status = 'failed'`)
	require.NoError(t, err)
	b, err = store.Backlog(context.Background())
	require.NoError(t, err)
	require.Zero(t, b.OldestFailed, "none failed")

	withProcessing := strings.Replace(ledger.BacklogQuery, "IN (", "IN ('processing', ", 1)
	require.NotEqual(t, ledger.BacklogQuery, withProcessing)
	require.NotContains(t, plan(withProcessing), "webhookevent_pending", "the index holds no processing rows")
}
