package ledger_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestDeliveryStatsAddAcrossProcesses: two receivers' counts of the same
// minute add up in one row per source and outcome, whatever the order of
// their flushes; the tallies come beside the outcome.
func TestDeliveryStatsAddAcrossProcesses(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := context.Background()
	a, b := ledger.NewDeliveryStats(db.SQL), ledger.NewDeliveryStats(db.SQL)
	var wg sync.WaitGroup
	for _, s := range []*ledger.DeliveryStats{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				s.Add("stripe", "claimed", false, false)
				s.Add("stripe", "duplicate", false, true)
				s.Add("github", "invalid_signature", false, false)
				s.Add("stripe", "claimed", true, false)
			}
		}()
	}
	wg.Wait()
	require.NoError(t, a.Flush(ctx))
	require.NoError(t, b.Flush(ctx))
	require.NoError(t, a.Flush(ctx), "an empty flush writes nothing")

	s := ledger.NewStore(db.SQL, nil, ledger.StoreOptions{})
	counts, err := s.DeliveryCounts(ctx, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	got := map[string]int64{}
	for _, c := range counts {
		got[c.Source+"/"+c.Outcome] = c.Count
		require.WithinDuration(t, time.Now(), c.Last, 2*time.Minute)
	}
	require.Equal(t, map[string]int64{
		"stripe/claimed": 200, "stripe/duplicate": 100, "stripe/would_skip": 100, "stripe/replayed": 100,
		"github/invalid_signature": 100,
	}, got)
	require.Equal(t, 5*db.Count(t, `SELECT count(DISTINCT minute) FROM delivery_stat`), db.Count(t, `SELECT count(*) FROM delivery_stat`),
		"one row per minute, source and outcome: both processes' counts share it")

	series, err := s.DeliverySeries(ctx, time.Now().Add(-time.Hour), time.Minute)
	require.NoError(t, err)
	var total int64
	for _, p := range series {
		total += p.Count
	}
	require.Equal(t, int64(600), total)
}

// TestDeliveryStatsKeptWhenAFlushFails: counts a flush could not write are
// written by the next one.
func TestDeliveryStatsKeptWhenAFlushFails(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	s := ledger.NewDeliveryStats(db.SQL)
	s.Add("stripe", "claimed", false, false)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, s.Flush(canceled))
	s.Add("stripe", "claimed", false, false)
	require.NoError(t, s.Flush(context.Background()))
	require.Equal(t, 2, db.Count(t, `SELECT COALESCE(sum(count), 0) FROM delivery_stat WHERE outcome = 'claimed'`))
}

// TestPruneDeletesOldDeliveryStats: the counts go with the ledger rows of
// their age.
func TestPruneDeletesOldDeliveryStats(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	_, err := db.SQL.Exec(`INSERT INTO delivery_stat (minute, source, outcome, count) VALUES
		(date_trunc('minute', now()) - interval '100 days', 'stripe', 'claimed', 3),
		(date_trunc('minute', now()) - interval '1 day', 'stripe', 'claimed', 4)`)
	require.NoError(t, err)
	_, err = ledger.NewStore(db.SQL, nil, ledger.StoreOptions{}).Prune(context.Background(), ledger.Retention{Rows: 90 * 24 * time.Hour}, false)
	require.NoError(t, err)
	require.Equal(t, 4, db.Count(t, `SELECT sum(count) FROM delivery_stat`))
}

// TestCountByStatusMatchesTheTable: the partial-index counts and the exact
// settled count of a small ledger agree with the rows.
func TestCountByStatusMatchesTheTable(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	inserted := time.Now()
	_, err := db.SQL.Exec(`
		INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, status, received_at)
		SELECT 'stripe', 'evt_' || g, 'stripe', 'stripe', 'x', '{}',
			(ARRAY['claimed', 'settled', 'settled', 'failed', 'discarded'])[g % 5 + 1], now() - g * interval '1 second'
		FROM generate_series(1, 500) g`)
	require.NoError(t, err)
	s := ledger.NewStore(db.SQL, nil, ledger.StoreOptions{})
	counts, estimated, err := s.CountByStatus(context.Background())
	require.NoError(t, err)
	require.False(t, estimated)
	require.Equal(t, map[string]int64{"claimed": 100, "processing": 0, "settled": 200, "failed": 100, "discarded": 100}, counts)
	b, err := s.Backlog(context.Background())
	require.NoError(t, err)
	require.Equal(t, ledger.Backlog{Claimed: 100, Failed: 100, Oldest: b.Oldest}, b)
	// evt_500, claimed 500 s before the insert, plus the time since.
	require.GreaterOrEqual(t, b.Oldest, 500*time.Second)
	require.LessOrEqual(t, b.Oldest, 500*time.Second+time.Since(inserted))
}
