package app_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/migrations"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/bench"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/redistest"
)

// markerKeys lists the keys of every marker under prefix.
func markerKeys(t *testing.T, rdb *redis.Client, prefix string) []string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), prefix+"*").Result()
	require.NoError(t, err)
	return keys
}

// xacts returns the database's committed and rolled-back transactions
// once every connection to it has closed, so that each backend has
// flushed its statistics.
func xacts(t *testing.T, db *dbtest.DB) int64 {
	t.Helper()
	db.Pool.Reset()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.Admin(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	dbtest.Eventually(t, func() bool {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, db.Name).Scan(&n))
		return n == 0
	}, "connections to %s close", db.Name)
	var n int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, db.Name).Scan(&n))
	return n
}

// scrape returns the value of one sample on /metrics (0 when absent or
// unreadable).
func scrape(base, sample string) float64 { return bench.ScrapeSample(http.DefaultClient, base, sample) }

// TestShortCircuitAnswersDuplicatesWithoutATransaction counts the test
// database's transactions: duplicates with a marker cost none, the same
// duplicates without one cost one each.
func TestShortCircuitAnswersDuplicatesWithoutATransaction(t *testing.T) {
	t.Parallel()
	url, prefix := redistest.URL(t), redistest.Prefix(t)
	rdb := redistest.Client(t, url)
	db := dbtest.New(t)
	// A generous timeout: on a busy machine a slow lookup would go to
	// PostgreSQL, which is right, but would blur the count.
	env := map[string]string{"REDIS_URL": url, "REDIS_KEY_PREFIX": prefix, "REDIS_TIMEOUT": "1s"}
	const n = 20
	now := time.Now()
	deliverAll := func(s *server, want string) {
		for i := range n {
			body := subEvent(fmt.Sprintf("evt_sc_%d", i), "active", now.Unix()+int64(i))
			code, out := s.post(t, "/webhooks/stripe", body, signed(body, now))
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, map[string]any{"status": want, "event_id": fmt.Sprintf("evt_sc_%d", i)}, out)
		}
	}

	s := startOn(t, db, env, config.RoleHTTP)
	deliverAll(s, "claimed")
	nul := []byte(`{"id":"evt_sc_nul","object":"event","type":"invoice.paid","created":1,"note":"a\u0000b"}`)
	code, _ := s.post(t, "/webhooks/stripe", nul, signed(nul, now))
	require.Equal(t, http.StatusBadRequest, code, "a payload PostgreSQL refuses")
	dbtest.Eventually(t, func() bool { return len(redistest.Markers(t, rdb, prefix)) == n })
	require.NotContains(t, redistest.Markers(t, rdb, prefix), "stripe/evt_sc_nul", "no marker for an event the ledger refused")
	require.NoError(t, s.stop())

	// The cost of starting, scraping and stopping a receiver alone.
	x0 := xacts(t, db)
	s = startOn(t, db, env, config.RoleHTTP)
	scrape(s.base, "hookledger_redis_shortcircuit_total")
	require.NoError(t, s.stop())
	x1 := xacts(t, db)
	idle := x1 - x0

	s = startOn(t, db, env, config.RoleHTTP)
	began := time.Now()
	for range 3 {
		deliverAll(s, "duplicate")
	}
	require.Equal(t, float64(3*n), scrape(s.base, `hookledger_redis_shortcircuit_total{source="stripe"}`))
	require.NoError(t, s.stop())
	x2 := xacts(t, db)
	// The only transactions are the receiver's delivery statistics: one
	// flush per StatFlushInterval that had counts, and one at shutdown,
	// each two to PostgreSQL's count (the statement's prepare and its run).
	flushes := int64(time.Since(began)/ledger.StatFlushInterval) + 1
	require.LessOrEqual(t, x2-x1-idle, 2*flushes, "duplicates with a marker cost no database transaction (%d answered)", 3*n)

	// Redis flushed: the same duplicates go to PostgreSQL again, one
	// transaction each, and nothing is claimed twice.
	require.NoError(t, rdb.Del(context.Background(), markerKeys(t, rdb, prefix)...).Err())
	s = startOn(t, db, env, config.RoleHTTP)
	deliverAll(s, "duplicate")
	scrape(s.base, "hookledger_redis_shortcircuit_total")
	require.NoError(t, s.stop())
	x3 := xacts(t, db)
	require.GreaterOrEqual(t, x3-x2-idle, int64(n), "without markers each duplicate costs a transaction")
	require.Equal(t, n, db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Equal(t, n, len(redistest.Markers(t, rdb, prefix)), "PostgreSQL's duplicate answers wrote the markers again")
}

// TestShortCircuitOffInLogOnly: log-only applies every delivery again, so
// a marker answers nothing and none is written.
func TestShortCircuitOffInLogOnly(t *testing.T) {
	t.Parallel()
	url, prefix := redistest.URL(t), redistest.Prefix(t)
	rdb := redistest.Client(t, url)
	s := start(t, map[string]string{"REDIS_URL": url, "REDIS_KEY_PREFIX": prefix, "CLAIM_MODE": "log-only"})
	identity, err := ledger.Identity(context.Background(), s.db.SQL)
	require.NoError(t, err)
	require.NoError(t, rdb.Set(context.Background(), prefix+identity+":stripe:evt_lo_1", "1", time.Minute).Err())
	now := time.Now()
	for i, want := range []string{"claimed", "duplicate"} {
		body := subEvent("evt_lo_1", "active", now.Unix())
		code, out := s.post(t, "/webhooks/stripe", body, signed(body, now))
		require.Equal(t, http.StatusOK, code, i)
		require.Equal(t, want, out["status"], "the ledger answers, not the marker")
	}
	body := subEvent("evt_lo_2", "active", now.Unix())
	code, _ := s.post(t, "/webhooks/stripe", body, signed(body, now))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, []string{"stripe/evt_lo_1"}, redistest.Markers(t, rdb, prefix), "log-only writes no marker")
}

// TestRedisNeverHidesWhatTheLedgerLacks: a marker whose event the ledger
// does not hold (a restore from backup, a failover that lost it, another
// deployment sharing the Redis prefix) never answers for it: a replay
// never asks Redis, markers carry the ledger's identity, and renewing it
// (`hookledger redis forget`) makes every earlier marker unread.
func TestRedisNeverHidesWhatTheLedgerLacks(t *testing.T) {
	t.Parallel()
	url, prefix := redistest.URL(t), redistest.Prefix(t)
	rdb := redistest.Client(t, url)
	env := map[string]string{"REDIS_URL": url, "REDIS_KEY_PREFIX": prefix, "REDIS_TIMEOUT": "1s", "REPLAY_TOKEN": "replay-secret"}
	db := dbtest.New(t)
	s := startOn(t, db, env, config.RoleAll)
	now := time.Now()
	body := subEvent("evt_restore", "active", now.Unix())
	deliver := func(s *server, h http.Header, want string) {
		t.Helper()
		code, out := s.post(t, "/webhooks/stripe", body, h)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, want, out["status"])
	}
	deliver(s, signed(body, now), "claimed")
	dbtest.Eventually(t, func() bool { return len(redistest.Markers(t, rdb, prefix)) == 1 }, "the marker is written")
	lose := func() {
		_, err := db.SQL.Exec(`DELETE FROM webhook_event WHERE event_id = 'evt_restore'`)
		require.NoError(t, err)
	}

	// The ledger lost the event: a replay brings it back, marker or not.
	lose()
	deliver(s, http.Header{"X-Replay-Token": {"replay-secret"}}, "claimed")
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_restore' AND replayed`))

	// Lost again, as a restore from a backup older than the event loses it:
	// the runbook renews the identity, and the provider's redelivery is
	// claimed again.
	lose()
	require.NoError(t, s.stop())
	_, err := ledger.RenewIdentity(context.Background(), db.SQL)
	require.NoError(t, err)
	s = startOn(t, db, env, config.RoleAll)
	deliver(s, signed(body, now), "claimed")
	deliver(s, signed(body, now), "duplicate")

	// Another deployment on the same Redis prefix: its migrations gave its
	// ledger an identity of its own.
	fresh := dbtest.Empty(t)
	require.NoError(t, migrations.Up(stdlib.OpenDBFromPool(fresh.Pool)))
	other := startOn(t, fresh, env, config.RoleAll)
	deliver(other, signed(body, now), "claimed")
}

// TestRedisForgetCommand: `hookledger redis forget` renews the ledger's
// identity, which every marker key carries.
func TestRedisForgetCommand(t *testing.T) {
	s := start(t, nil)
	t.Setenv("DATABASE_URL", s.db.URL)
	before, err := ledger.Identity(context.Background(), s.db.SQL)
	require.NoError(t, err)
	code, stdout, stderr := run("redis", "forget")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "ledger identity renewed")
	after, err := ledger.Identity(context.Background(), s.db.SQL)
	require.NoError(t, err)
	require.NotEqual(t, before, after)
	require.Regexp(t, `^[0-9a-f]{32}$`, after)
	code, _, _ = run("redis", "forget", "extra")
	require.Equal(t, 2, code, "unknown arguments are usage errors")
}
