package binary_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/operations/simulate"
	"github.com/hookledger/hookledger/modules/testsupport/bench"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/redistest"
)

// storm runs the simulator's Stripe and Standard Webhooks events against
// p: with the same prefix every run delivers the same events again.
func storm(t *testing.T, p *proc, events int, prefix string) []*simulate.Report {
	t.Helper()
	reports := load(t, p, events, 400, prefix)()
	for _, r := range reports {
		require.Empty(t, r.Unacked)
		require.Zero(t, r.Retries, "no delivery was answered with an error: %v", r.Responses)
		for status := range r.Responses {
			require.Contains(t, []string{"200 claimed", "200 duplicate"}, status)
		}
	}
	return reports
}

// redisFaultRun starts a throwaway Redis, a database and a serve process
// using both, for a fault test.
func redisFaultRun(t *testing.T, env ...string) (*redistest.Server, *redis.Client, *dbtest.DB, *proc) {
	t.Helper()
	if testing.Short() {
		t.Skip("fault test")
	}
	t.Parallel()
	srv := redistest.Start(t)
	db := dbtest.New(t)
	return srv, redistest.Client(t, srv.URL), db, startProc(t, db.URL, append([]string{"REDIS_URL=" + srv.URL}, env...)...)
}

// TestShortCircuitSurvivesRedisKilledAndFlushed: Redis killed in the middle
// of a duplicate storm, then back empty, then flushed: no delivery is
// answered with an error, every event is claimed exactly once and applied
// once.
func TestShortCircuitSurvivesRedisKilledAndFlushed(t *testing.T) {
	// Any error answer must be Redis's doing: give claims time on a busy
	// machine.
	// A generous Redis timeout too: a slow lookup on a loaded machine must
	// not reopen the breaker the test expects closed at the end.
	srv, rdb, db, p := redisFaultRun(t, "CLAIM_TIMEOUT=10s", "REDIS_TIMEOUT=1s")
	base := "http://" + p.addr
	const events = 150
	first := storm(t, p, events, "rk_")

	// Kill Redis once the storm is being short-circuited, bring it back
	// empty once lookups have failed.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if assertEventually(func() bool {
			return bench.ScrapeSample(http.DefaultClient, base, `hookledger_redis_shortcircuit_total{source="stripe"}`) > 20
		}, dbtest.Patience) {
			srv.Kill()
		}
		if assertEventually(func() bool {
			return bench.ScrapeSample(http.DefaultClient, base, `hookledger_redis_errors_total{op="lookup"}`) > 0
		}, dbtest.Patience) {
			srv.Restart()
		}
	}()
	for range 3 {
		storm(t, p, events, "rk_")
	}
	wg.Wait()
	require.Positive(t, bench.ScrapeSample(http.DefaultClient, base, `hookledger_redis_errors_total{op="lookup"}`), "the storm ran while Redis was down")
	// Redis back, empty: once the breaker's pause is over a probe finds
	// it, PostgreSQL answers the duplicates and their markers return.
	for deadline := time.Now().Add(dbtest.Patience); len(redistest.Markers(t, rdb, "hookledger:sc:")) == 0; {
		require.True(t, time.Now().Before(deadline), "markers are written again once Redis is back")
		storm(t, p, events, "rk_")
	}
	require.Zero(t, bench.ScrapeSample(http.DefaultClient, base, "hookledger_redis_breaker_open"))
	require.NoError(t, rdb.FlushAll(context.Background()).Err())
	storm(t, p, events, "rk_")

	claimed := 0
	for _, r := range first {
		claimed += r.Responses["200 claimed"]
	}
	require.Equal(t, 2*events, claimed, "the first storm claimed each event once")
	require.Equal(t, 2*events, db.Count(t, `SELECT count(*) FROM webhook_event`))
	verify(t, db.SQL, "rk_", first)
	require.Empty(t, redistest.MissingFromLedger(t, db.SQL, redistest.Markers(t, rdb, "hookledger:sc:")))
}

// TestMarkerNeverWithoutLedgerRow kills the receiver with SIGKILL twice
// under load (between commits and their marker writes), and Redis once;
// all along, every marker names an event the ledger holds, and at the end
// nothing is lost or applied twice.
func TestMarkerNeverWithoutLedgerRow(t *testing.T) {
	srv, rdb, db, p := redisFaultRun(t)

	done := make(chan struct{})
	violations := make(chan []string, 1)
	go func() {
		var seen []string
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				violations <- seen
				return
			case <-tick.C:
			}
			// Markers first, then the ledger: a marker is written after its
			// commit, so its row exists by the time the ledger is asked.
			keys, err := redistest.ScanMarkers(rdb, "hookledger:sc:")
			if err != nil {
				continue // Redis is being killed
			}
			missing, err := redistest.LedgerLacks(db.SQL, keys)
			if err != nil {
				missing = []string{err.Error()}
			}
			seen = append(seen, missing...)
		}
	}()

	wait := load(t, p, 300, 150, "mk_")
	rows := func(n int) func() bool {
		return func() bool { return db.Count(t, `SELECT count(*) FROM webhook_event`) >= n }
	}
	dbtest.Eventually(t, rows(100))
	p.kill9()
	p.start()
	dbtest.Eventually(t, rows(250))
	srv.Kill()
	p.kill9()
	srv.Restart()
	p.start()
	reports := wait()
	close(done)
	require.Empty(t, <-violations, "a marker named an event the ledger did not hold")
	verify(t, db.SQL, "mk_", reports)
	require.Empty(t, redistest.MissingFromLedger(t, db.SQL, redistest.Markers(t, rdb, "hookledger:sc:")))
}
