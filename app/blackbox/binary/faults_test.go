package binary_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/migrations"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/operations/simulate"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/devdb"
)

// load runs the simulator for Stripe subscriptions and Standard Webhooks
// usage deltas at once.
func load(t *testing.T, p *proc, events int, rate float64, prefix string) func() []*simulate.Report {
	t.Helper()
	var (
		wg      sync.WaitGroup
		reports = make([]*simulate.Report, 2)
	)
	for i, name := range []string{"stripe", "standard"} {
		prov, _ := provider.Lookup(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := simulate.Run(context.Background(), simulate.Options{
				URL: "http://" + p.addr + "/webhooks/" + name, Provider: prov, Secret: providerSecrets[name],
				Events: events, Prefix: prefix, Duplicates: 0.3, Reorder: 0.3, Rate: rate, Concurrency: 8,
				RetryBackoff: 50 * time.Millisecond, Deadline: 3 * time.Minute, Seed: uint64(i + 1),
				// The client waits out the claim's timeout: a slow claim on a
				// loaded machine is answered, and counted as what it was.
				HTTP: &http.Client{Timeout: p.claimTimeout + 5*time.Second},
			})
			if err != nil {
				t.Error(err) // reported from this goroutine; require stops only the test's own
			}
			reports[i] = r
		}()
	}
	return func() []*simulate.Report {
		wg.Wait()
		if t.Failed() {
			t.FailNow() // on the test's goroutine, where the simulators' errors were reported
		}
		return reports
	}
}

// Figures are what a fault run shows.
type Figures struct {
	Events, Deliveries, Acked, Lost, AppliedTwice, Stuck int
}

// verify checks the invariants: every acknowledged event is in the ledger
// and settled once, usage deltas add up exactly, every subscription holds
// its newest version, and no apply job is left behind.
func verify(t *testing.T, db *sql.DB, prefix string, reports []*simulate.Report) Figures {
	t.Helper()
	var f Figures
	stripe, standard := reports[0], reports[1]
	for _, r := range reports {
		f.Events += r.Events
		f.Deliveries += r.Deliveries
		f.Acked += r.Acked
		require.Empty(t, r.Unacked, "every event eventually got a 2xx")
	}
	if !assertEventually(func() bool {
		var pending int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM webhook_event WHERE status <> 'settled'`).Scan(&pending))
		return pending == 0
	}, 150*time.Second) {
		dumpPending(t, db)
		t.Fatal("every claimed event settles")
	}

	for ns, r := range map[string]*simulate.Report{"stripe": stripe, "standard": standard} {
		var settled int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM webhook_event WHERE namespace = $1 AND status = 'settled' AND event_id = ANY($2)`,
			ns, r.AckedIDs).Scan(&settled))
		f.Lost += len(r.AckedIDs) - settled
	}
	for customer, want := range standard.Expect.Usage {
		var got int64
		err := db.QueryRow(`SELECT quantity FROM usage_total WHERE customer_id = $1 AND metric = 'api_calls'`, customer).Scan(&got)
		require.NoError(t, err, customer)
		if got > want {
			f.AppliedTwice++
		}
		if got < want {
			f.Lost++
		}
	}
	for sub, want := range stripe.Expect.Subscriptions {
		var (
			status  string
			version int64
		)
		require.NoError(t, db.QueryRow(`SELECT status, version FROM subscription WHERE provider = 'stripe' AND external_id = $1`, sub).Scan(&status, &version))
		require.Equal(t, want, simulate.SubscriptionState{Status: status, Version: version}, "subscription %s holds its newest version", sub)
	}
	// Every row settled; the jobs that still hold settled events (a rescued
	// run's, a split's, a requeue's) find them so and complete. A job that
	// has not once its time is up is stuck.
	unfinished := func() int {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM river_job WHERE kind IN ('apply_event', 'apply_batch') AND state <> 'completed'`).Scan(&n))
		return n
	}
	assertEventually(func() bool { return unfinished() == 0 }, 150*time.Second)
	f.Stuck = unfinished()
	require.Zero(t, f.Lost, "nothing acknowledged is lost")
	require.Zero(t, f.AppliedTwice, "nothing is applied twice")
	require.Zero(t, f.Stuck, "no apply job is stuck")
	t.Logf("figures: %+v", f)
	return f
}

// TestCrashRecovery kills the serve process with SIGKILL under load, once
// at random and once while its workers are inside apply transactions, and
// restarts it. Nothing acknowledged is lost, nothing is applied twice.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test")
	}
	t.Parallel()
	db := dbtest.New(t)
	p := startProc(t, db.URL)
	wait := load(t, p, 300, 120, "crash_")

	underLoad(t, db.SQL, 50)
	p.kill9()
	p.start()

	// Hold the usage table so the workers block inside their apply
	// transactions, then kill them there. A table lock, which waits for the
	// applies under way and is then the only lock the test holds: locking
	// the rows one by one could deadlock with an apply that holds some of
	// them and waits for another.
	dbtest.Eventually(t, func() bool { return db.Count(t, `SELECT count(*) FROM usage_total`) > 0 })
	tx, err := db.SQL.Begin()
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() }) // a failure below must not leave the lock to the database's cleanup
	_, err = tx.Exec(`LOCK TABLE usage_total IN EXCLUSIVE MODE`)
	require.NoError(t, err)
	// A worker waits on the lock: it is inside its apply transaction.
	dbtest.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
	p.kill9()
	require.NoError(t, tx.Rollback())
	p.start()

	verify(t, db.SQL, "crash_", wait())
}

// TestDatabaseRestart stops PostgreSQL abruptly under load (a cluster of the
// test's own) and starts it again: receivers answer 503 meanwhile, the
// simulator retries, and the process recovers without manual steps.
func TestDatabaseRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test")
	}
	t.Parallel()
	cluster, url := ownCluster(t)
	p := startProc(t, url)
	wait := load(t, p, 300, 120, "pgdown_")

	probe := stdlib.OpenDB(mustConnConfig(t, url))
	underLoad(t, probe, 50)
	probe.Close()
	require.NoError(t, cluster.Stop(context.Background(), "immediate"))
	down := []byte(`{"id":"evt_down","type":"x"}`)
	h, _ := provider.Stripe.Sign(providerSecrets["stripe"], provider.Delivery{Body: down})
	code := post(t, "http://"+p.addr+"/webhooks/stripe", down, h)
	require.Equal(t, http.StatusServiceUnavailable, code, "database down: 503 so the provider retries")
	require.NoError(t, cluster.Start(context.Background()))

	db := stdlib.OpenDB(mustConnConfig(t, url))
	defer db.Close()
	verify(t, db, "pgdown_", wait())
}

// ownCluster starts a throwaway PostgreSQL that the test may stop.
func ownCluster(t *testing.T) (*devdb.Cluster, string) {
	t.Helper()
	parent, err := os.MkdirTemp("", "hookledger-fault-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(parent, 0o755))
	c, err := devdb.NewCluster(filepath.Join(parent, "data"), freePort(t))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, c.Init(ctx))
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() {
		_ = c.Stop(context.Background(), "immediate")
		os.RemoveAll(parent)
	})
	url, err := devdb.EnsureDatabase(ctx, c.URL(), "hookledger")
	require.NoError(t, err)
	require.NoError(t, migrations.Up(stdlib.OpenDB(mustConnConfig(t, url))))
	return c, url
}

func mustConnConfig(t *testing.T, url string) pgx.ConnConfig {
	t.Helper()
	c, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	return *c
}

// TestChaos is the long run behind `go tool task test:chaos`: sustained
// load while the serve process is SIGKILLed every few seconds and
// PostgreSQL is stopped abruptly now and then. Its figures are in
// docs/RELIABILITY.md.
func TestChaos(t *testing.T) {
	// Serial: its figures are the product's under load, not under other tests'.
	if os.Getenv("HOOKLEDGER_CHAOS") == "" {
		t.Skip("set HOOKLEDGER_CHAOS=1 (go tool task test:chaos)")
	}
	events := 3000
	if v := os.Getenv("HOOKLEDGER_CHAOS_EVENTS"); v != "" {
		_, _ = fmt.Sscan(v, &events)
	}
	cluster, url := ownCluster(t)
	p := startProc(t, url)
	start := time.Now()
	wait := load(t, p, events, 150, "chaos_")
	done := make(chan []*simulate.Report)
	go func() { done <- wait() }()

	kills, restarts := 0, 0
	var reports []*simulate.Report
chaos:
	for round := 1; ; round++ {
		select {
		case reports = <-done:
			break chaos
		case <-time.After(time.Duration(2000+round*137%1500) * time.Millisecond):
		}
		if round%4 == 0 {
			require.NoError(t, cluster.Stop(context.Background(), "immediate"))
			time.Sleep(time.Second) // the outage's length: the fault, not a wait for anything
			require.NoError(t, cluster.Start(context.Background()))
			restarts++
			continue
		}
		p.kill9()
		kills++
		time.Sleep(150 * time.Millisecond) // down as long as a quick restart takes: the fault, not a wait
		p.start()
	}
	db := stdlib.OpenDB(mustConnConfig(t, url))
	defer db.Close()
	f := verify(t, db, "chaos_", reports)
	t.Logf("CHAOS events=%d deliveries=%d acked=%d kills=%d db_restarts=%d lost=%d applied_twice=%d stuck=%d elapsed=%s",
		f.Events, f.Deliveries, f.Acked, kills, restarts, f.Lost, f.AppliedTwice, f.Stuck, time.Since(start).Round(time.Second))
}

func assertEventually(cond func() bool, within time.Duration) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// dumpPending logs the unsettled rows and their River jobs.
func dumpPending(t *testing.T, db *sql.DB) {
	rows, err := db.Query(`
		SELECT e.namespace, e.event_id, e.status, e.attempts, COALESCE(e.last_error, ''),
			COALESCE(j.state::text, 'no job'), COALESCE(j.attempt, 0), COALESCE(j.scheduled_at::text, ''),
			COALESCE((SELECT string_agg(x->>'error', ' | ') FROM unnest(j.errors) x), '')
		FROM webhook_event e
		LEFT JOIN river_job j ON (j.kind = 'apply_event' AND j.args->>'namespace' = e.namespace AND j.args->>'event_id' = e.event_id)
			OR (j.kind = 'apply_batch' AND j.args->'events' @> jsonb_build_array(jsonb_build_object('namespace', e.namespace, 'event_id', e.event_id)))
		WHERE e.status <> 'settled' LIMIT 20`)
	if err != nil {
		t.Logf("dump: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var ns, id, st, lastErr, jst, sched, errs string
		var att, jatt int
		_ = rows.Scan(&ns, &id, &st, &att, &lastErr, &jst, &jatt, &sched, &errs)
		t.Logf("pending %s/%s %s attempts=%d last_error=%q job=%s attempt=%d scheduled=%s errors=%s", ns, id, st, att, lastErr, jst, jatt, sched, errs)
	}
	var now string
	_ = db.QueryRow(`SELECT now()::text`).Scan(&now)
	t.Logf("now %s", now)
}

// underLoad waits until at least n events are in the ledger: the fault
// that follows hits a receiver under load, whatever the machine's speed.
func underLoad(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	dbtest.Eventually(t, func() bool {
		var got int
		return db.QueryRow(`SELECT count(*) FROM webhook_event`).Scan(&got) == nil && got >= n
	}, "fewer than %d events arrived", n)
}
