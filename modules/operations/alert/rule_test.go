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

// TestFailedEventsFireAfterTheirAge: failed_events fires once an event
// has been failed for longer than FailedAge, whatever the group, and
// counts the groups and events past that age only.
func TestFailedEventsFireAfterTheirAge(t *testing.T) {
	t.Parallel()
	now := time.Now()
	groups := []Group{
		{ID: "new", Count: 7, Source: "stripe", Handler: "payment.stripeInvoicePaid", Error: "e1", FirstFailedAt: now.Add(-10 * time.Minute)},
	}
	r := &Rules{FailedAge: time.Hour, orphansSeen: -1,
		GroupsFunc: func(context.Context) ([]Group, error) { return groups, nil }}
	names := func() []string {
		a, err := r.Firing(context.Background())
		require.NoError(t, err)
		var out []string
		for _, x := range a {
			out = append(out, x.Key)
		}
		return out
	}
	require.Equal(t, []string{"failure_group:new"}, names(), "failed for ten minutes: not yet")

	groups = append(groups,
		Group{ID: "old", Count: 20, Source: "stripe", Handler: "subscription.applyStripe", Error: "e2", FirstFailedAt: now.Add(-3 * time.Hour)},
		Group{ID: "older", Count: 3, Source: "github", Error: "e3", FirstFailedAt: now.Add(-5 * time.Hour)})
	require.Equal(t, []string{"failure_group:new", "failure_group:old", "failure_group:older", "failed_events"}, names())
	a, ok := r.failedTooLong(groups, now)
	require.True(t, ok)
	require.Equal(t, "failed_events", a.Name)
	require.Equal(t, "events have been failed for over 1h0m0s, the oldest for 5h0m0s: 2 group(s) of 23 failed event(s) wait for a fix, a requeue or a discard (hookledger failures)", a.Summary)

	_, ok = r.failedTooLong(groups[:1], now.Add(50*time.Minute))
	require.False(t, ok, "an hour to the second is not over an hour")
	_, ok = r.failedTooLong(groups[:1], now.Add(51*time.Minute))
	require.True(t, ok)
	_, ok = r.failedTooLong(nil, now)
	require.False(t, ok, "no failed events")
}
