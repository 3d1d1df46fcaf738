package app_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEventsDiscardIsAllOrNothing: a discard of several events discards
// all of them or none. While an apply holds one of them (here a
// transaction holding its row's lock), the command discards none, exits
// 1 and names the one refused and that nothing was discarded; run again
// when the apply has ended, it discards all, a line each. --help says so.
func TestEventsDiscardIsAllOrNothing(t *testing.T) {
	s := start(t, nil)
	refuseBrokenPlan(t, s)
	for _, id := range []string{"evt_many_a", "evt_many_b", "evt_many_c"} {
		discardFailingEvent(t, s, id)
	}
	t.Setenv("DATABASE_URL", s.db.URL)

	ctx := context.Background()
	tx, err := s.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `SELECT 1 FROM webhook_event WHERE event_id = 'evt_many_b' FOR UPDATE`)
	require.NoError(t, err)
	code, stdout, stderr := run("events", "discard", "evt_many_a", "evt_many_b", "evt_many_c", "--reason", "test mode")
	require.NoError(t, tx.Rollback())
	require.Equal(t, 1, code, stderr)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "stripe/evt_many_b: event is being applied right now")
	require.Contains(t, stderr, "nothing was discarded")
	for _, id := range []string{"evt_many_a", "evt_many_b", "evt_many_c"} {
		require.Equal(t, "failed", status(t, s, id), id)
	}

	code, stdout, stderr = run("events", "discard", "evt_many_a", "evt_many_b", "evt_many_c", "--reason", "test mode")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "stripe/evt_many_a: discarded (reason: test mode)\n"+
		"stripe/evt_many_b: discarded (reason: test mode)\n"+
		"stripe/evt_many_c: discarded (reason: test mode)\n", stdout)
	require.Equal(t, 3, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'evt_many_%' AND status = 'discarded'`))

	code, stdout, _ = run("events", "discard", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "all of them or none")
}

// TestEventsRequeueReportsEachID: a requeue of several events requeues
// each in a transaction of its own and prints what it did with each: one
// being applied right now is pending (left to that apply), the others are
// requeued, and the exit code is 0; --help says so.
func TestEventsRequeueReportsEachID(t *testing.T) {
	s := start(t, nil)
	refuseBrokenPlan(t, s)
	for _, id := range []string{"evt_rq_a", "evt_rq_b"} {
		discardFailingEvent(t, s, id)
	}
	t.Setenv("DATABASE_URL", s.db.URL)

	ctx := context.Background()
	tx, err := s.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `SELECT 1 FROM webhook_event WHERE event_id = 'evt_rq_b' FOR UPDATE`)
	require.NoError(t, err)
	code, stdout, stderr := run("events", "requeue", "evt_rq_a", "evt_rq_b")
	require.NoError(t, tx.Rollback())
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "stripe/evt_rq_a: requeued\n"+
		"stripe/evt_rq_b: pending (being applied right now: left to that apply, not requeued)\n", stdout)

	code, stdout, _ = run("events", "requeue", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "a line for each")
	require.Contains(t, stdout, "transaction of its own")
}
