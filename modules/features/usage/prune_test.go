package usage_test

import (
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/ledger"
)

// TestPruneLeavesDeltasAndTheDocumentedCompaction: prune deletes a usage
// event's ledger row and keeps its delta; the compaction docs/operating.md
// gives deletes the deltas of pruned events older than KEY_RETENTION, and
// no other, and leaves the totals as they were.
func TestPruneLeavesDeltasAndTheDocumentedCompaction(t *testing.T) {
	t.Parallel()
	h := setup(t, 0)
	for id, qty := range map[string]int{"msg_old": 3, "msg_kept": 4, "msg_recent": 5} {
		require.True(t, h.Claim(t, "standard", id, "usage.recorded", recorded("cus_p", "api_calls", qty)))
		require.NoError(t, h.Apply(t, "standard", id, false))
	}
	// msg_old was received past KEY_RETENTION, msg_kept past RETENTION only.
	for id, age := range map[string]time.Duration{"msg_old": 500 * 24 * time.Hour, "msg_kept": 100 * 24 * time.Hour} {
		_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET received_at = now() - $2::interval, settled_at = now() - $2::interval WHERE event_id = $1`, id, age.String())
		require.NoError(t, err)
		_, err = h.DB.SQL.Exec(`UPDATE usage_delta SET applied_at = now() - $2::interval WHERE event_id = $1`, id, age.String())
		require.NoError(t, err)
	}

	_, err := h.Claimer.Prune(context.Background(), ledger.Retention{Rows: config.DefaultRetention, Keys: config.DefaultKeyRetention}, false)
	require.NoError(t, err)
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event`), "the two old rows are pruned")
	require.Equal(t, 3, h.DB.Count(t, `SELECT count(*) FROM usage_delta`), "prune leaves every delta")
	require.Equal(t, 12, total(t, h, "cus_p", "api_calls"))

	doc, err := os.ReadFile("../../../docs/operating.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```sql\n(DELETE FROM usage_delta.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/operating.md gives the compaction")
	require.Contains(t, string(m[1]), "interval '400 days'", "the default KEY_RETENTION")
	require.Equal(t, 9600*time.Hour, config.DefaultKeyRetention)
	for {
		res, err := h.DB.SQL.Exec(string(m[1]))
		require.NoError(t, err)
		if n, _ := res.RowsAffected(); n == 0 {
			break
		}
	}
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM usage_delta WHERE event_id IN ('msg_kept', 'msg_recent')`),
		"a pruned event's delta within KEY_RETENTION, and a live event's, stay")
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM usage_delta`))
	require.Equal(t, 12, total(t, h, "cus_p", "api_calls"), "the totals stay")
}
