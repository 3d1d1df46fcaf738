package alert

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestChangesSendEachStateOnce: an alert fires once, again only when it
// grows a level, and resolves once when it stops firing.
func TestChangesSendEachStateOnce(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	group := func(n int) Alert {
		return Alert{Key: "failure_group:abc", Name: "failure_group", Summary: "s", Level: tenfold(n)}
	}
	got := changes([]Alert{group(20)}, map[string]last{}, now)
	require.Len(t, got, 1)
	require.Equal(t, StatusFiring, got[0].Status)
	require.Equal(t, "failure_group:abc", got[0].Key)

	fired := map[string]last{"failure_group:abc": {status: StatusFiring, level: tenfold(20)}}
	require.Empty(t, changes([]Alert{group(20)}, fired, now), "unchanged")
	require.Empty(t, changes([]Alert{group(99)}, fired, now), "grew, but not tenfold")
	grown := changes([]Alert{group(150)}, fired, now)
	require.Len(t, grown, 1)
	require.Equal(t, StatusFiring, grown[0].Status)

	resolved := changes(nil, fired, now)
	require.Len(t, resolved, 1)
	require.Equal(t, StatusResolved, resolved[0].Status)
	require.Equal(t, "failure_group", resolved[0].Alert)
	require.Empty(t, changes(nil, map[string]last{"failure_group:abc": {status: StatusResolved}}, now), "resolved stays quiet")
	again := changes([]Alert{group(3)}, map[string]last{"failure_group:abc": {status: StatusResolved}}, now)
	require.Len(t, again, 1, "a resolved alert that fires again is sent again")

	require.Equal(t, []int{0, 0, 0, 1, 1, 2}, []int{tenfold(0), tenfold(9), tenfold(99), tenfold(100), tenfold(999), tenfold(1000)})
}

// TestRulesFire: the backlog's age, a source's refused signatures and
// 503 answers in the last five minutes, drift and new orphans fire past
// their thresholds, and not below them.
func TestRulesFire(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	orphans, drift := 0.0, 0.0
	backlog := ledger.Backlog{Claimed: 1, Oldest: time.Minute}
	r := &Rules{DB: db.SQL, OldestPending: 10 * time.Minute, SignatureFailures: 10, orphansSeen: -1,
		Backlog:     func(context.Context) (ledger.Backlog, error) { return backlog, nil },
		OrphansFunc: func() float64 { return orphans }, DriftFunc: func() float64 { return drift }}
	keys := func() []string {
		a, err := r.Firing(context.Background())
		require.NoError(t, err)
		var out []string
		for _, x := range a {
			out = append(out, x.Key)
		}
		return out
	}
	require.Empty(t, keys())

	_, err := db.SQL.Exec(`INSERT INTO delivery_stat (minute, source, outcome, count) VALUES
		(date_trunc('minute', now()), 'stripe', 'invalid_signature', 6),
		(date_trunc('minute', now()) - interval '1 minute', 'stripe', 'invalid_signature', 4),
		(date_trunc('minute', now()) - interval '30 minutes', 'github', 'invalid_signature', 50),
		(date_trunc('minute', now()), 'github', 'invalid_signature', 9),
		(date_trunc('minute', now()), 'paddle', 'claimed', 500),
		(date_trunc('minute', now()), 'paddle', 'unavailable', 1)`)
	require.NoError(t, err)
	backlog.Oldest = 11 * time.Minute
	orphans, drift = 2, 3
	require.Equal(t, []string{"backlog_oldest_pending", "signature_failures:stripe", "deliveries_unavailable:paddle", "drift_found", "ledger_orphans"}, keys())
	require.Equal(t, []string{"backlog_oldest_pending", "signature_failures:stripe", "deliveries_unavailable:paddle", "drift_found"}, keys(), "no new orphans since the last check")
}
