package alert

import (
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/migrations"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestUpgradeCarriesAlertStatesOver: the migration that brings
// alert_state fills it from the alert_notify jobs River still has, so an
// alert firing across the upgrade is not announced again: each alert's
// newest message gives its status, a firing one fired with its first
// firing message since it last resolved.
func TestUpgradeCarriesAlertStatesOver(t *testing.T) {
	t.Parallel()
	db := dbtest.Empty(t)
	open := func() *sql.DB { return stdlib.OpenDBFromPool(db.Pool) }
	// The schema with alert_state, before the backfill.
	require.NoError(t, migrations.UpTo(open(), 20261207041642))
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	for _, n := range []NotifyArgs{
		{Status: StatusFiring, Alert: "failure_group", Key: "failure_group:g1", Summary: "first", Level: 1, At: at(0)},
		{Status: StatusResolved, Alert: "failure_group", Key: "failure_group:g1", Summary: "gone", Level: 1, At: at(5)},
		{Status: StatusFiring, Alert: "failure_group", Key: "failure_group:g1", Summary: "back", Level: 2, At: at(10)},
		{Status: StatusFiring, Alert: "failure_group", Key: "failure_group:g1", Summary: "grown", Level: 3, At: at(20)},
		{Status: StatusFiring, Alert: "backlog_oldest_pending", Key: "backlog_oldest_pending", Summary: "old", At: at(1)},
		{Status: StatusResolved, Alert: "backlog_oldest_pending", Key: "backlog_oldest_pending", Summary: "ok", At: at(7)},
	} {
		args, err := json.Marshal(n)
		require.NoError(t, err)
		_, err = db.SQL.Exec(`INSERT INTO river_job (kind, args, max_attempts, state, finalized_at) VALUES ('alert_notify', $1, 25, 'completed', now())`, args)
		require.NoError(t, err)
	}
	require.NoError(t, migrations.Up(open()))

	type state struct {
		Status, Summary string
		Level           int64
		FiredAt         time.Time
		ResolvedAt      sql.NullTime
	}
	read := func(key string) state {
		var s state
		require.NoError(t, db.SQL.QueryRow(`SELECT status, summary, level, fired_at, resolved_at FROM alert_state WHERE key = $1`, key).
			Scan(&s.Status, &s.Summary, &s.Level, &s.FiredAt, &s.ResolvedAt))
		return s
	}
	g := read("failure_group:g1")
	require.Equal(t, StatusFiring, g.Status)
	require.Equal(t, "grown", g.Summary)
	require.EqualValues(t, 3, g.Level)
	require.True(t, g.FiredAt.Equal(at(10)), "fired with its first message since it resolved, got %s", g.FiredAt)
	require.False(t, g.ResolvedAt.Valid)

	b := read("backlog_oldest_pending")
	require.Equal(t, StatusResolved, b.Status)
	require.True(t, b.FiredAt.Equal(at(1)), "got %s", b.FiredAt)
	require.True(t, b.ResolvedAt.Valid && b.ResolvedAt.Time.Equal(at(7)), "got %v", b.ResolvedAt)
	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM alert_state`))
}
