package binary_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/migrations"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/operations/simulate"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/devdb"
)

// TestFailover is behind `go tool task test:failover`: a primary and a
// streaming standby of the test's own, hookledger on a multi-host URL
// (target_session_attrs=read-write), the primary killed under load and the
// standby promoted. With synchronous replication every acknowledged event
// is in the new primary and applied exactly once; with asynchronous
// replication the test reports how many acknowledged events the failover
// lost. Its figures are in docs/RELIABILITY.md.
func TestFailover(t *testing.T) {
	// Serial: its figures are the product's under load, not under other tests'.
	if os.Getenv("HOOKLEDGER_FAILOVER") == "" {
		t.Skip("set HOOKLEDGER_FAILOVER=1 (go tool task test:failover)")
	}
	for _, behind := range []bool{false, true} {
		name := map[bool]string{false: "synchronous", true: "synchronous_standby_behind"}[behind]
		t.Run(name, func(t *testing.T) {
			db, prefix, reports := failover(t, true, behind)
			f := verify(t, db, prefix, reports)
			t.Logf("FAILOVER %s events=%d deliveries=%d acked=%d lost=%d applied_twice=%d", name, f.Events, f.Deliveries, f.Acked, f.Lost, f.AppliedTwice)
		})
	}
	for _, behind := range []bool{false, true} {
		name := map[bool]string{false: "asynchronous", true: "asynchronous_standby_behind"}[behind]
		t.Run(name, func(t *testing.T) {
			db, _, reports := failover(t, false, behind)
			settled(t, db)
			acked, lost := 0, 0
			for i, ns := range []string{"stripe", "standard"} {
				var present int
				require.NoError(t, db.QueryRow(`SELECT count(*) FROM webhook_event WHERE namespace = $1 AND event_id = ANY($2)`,
					ns, reports[i].AckedIDs).Scan(&present))
				acked += len(reports[i].AckedIDs)
				lost += len(reports[i].AckedIDs) - present
			}
			t.Logf("FAILOVER %s acked=%d lost=%d (acknowledged events missing after promotion)", name, acked, lost)
			if behind {
				require.Positive(t, lost, "a standby behind the primary loses what the primary acknowledged meanwhile")
			}
		})
	}
}

// failover runs the scenario and returns the promoted standby's database,
// the event prefix and the simulator's reports. behind stops the standby's
// WAL receiver before the kill, as a slow network or a busy standby would,
// until the primary has committed 150 more claims (asynchronous) or has
// commits waiting for the standby (synchronous).
func failover(t *testing.T, synchronous, behind bool) (*sql.DB, string, []*simulate.Report) {
	t.Helper()
	ctx := context.Background()
	parent, err := os.MkdirTemp("", "hookledger-failover-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(parent, 0o755))
	primary, err := devdb.NewCluster(filepath.Join(parent, "primary"), freePort(t))
	require.NoError(t, err)
	require.NoError(t, primary.Init(ctx))
	require.NoError(t, primary.Start(ctx))
	var standby *devdb.Cluster
	t.Cleanup(func() {
		_ = primary.Stop(context.Background(), "immediate")
		if standby != nil {
			_ = standby.Stop(context.Background(), "immediate")
		}
		os.RemoveAll(parent)
	})
	url, err := devdb.EnsureDatabase(ctx, primary.URL(), "hookledger")
	require.NoError(t, err)
	require.NoError(t, migrations.Up(stdlib.OpenDB(mustConnConfig(t, url))))

	standby, err = primary.Standby(ctx, filepath.Join(parent, "standby"), freePort(t))
	require.NoError(t, err)
	require.NoError(t, standby.Start(ctx))
	admin := stdlib.OpenDB(mustConnConfig(t, primary.URL()))
	defer admin.Close()
	if synchronous {
		// Set after the base backup, so the standby, once promoted, does not
		// wait for a standby of its own.
		for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = '*'`, `ALTER SYSTEM SET synchronous_commit = 'on'`, `SELECT pg_reload_conf()`} {
			_, err := admin.Exec(q)
			require.NoError(t, err, q)
		}
	}
	wantSync := map[bool]string{true: "sync", false: "async"}[synchronous]
	dbtest.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow(`SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1`, wantSync).Scan(&n)
		return err == nil && n == 1
	}, "the standby streams (%s)", wantSync)

	multi := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/hookledger?sslmode=disable&target_session_attrs=read-write", primary.Port, standby.Port)
	p := startProc(t, multi)
	prefix := fmt.Sprintf("failover_%s_%v_", wantSync, behind)
	wait := load(t, p, 400, 200, prefix)

	// Kill the primary while deliveries are being claimed and applied.
	onPrimary := stdlib.OpenDB(mustConnConfig(t, url))
	dbtest.Eventually(t, func() bool {
		var n int
		return onPrimary.QueryRow(`SELECT count(*) FROM webhook_event`).Scan(&n) == nil && n >= 200
	}, "load reaches the primary")
	receiver := 0
	if behind {
		onStandby := stdlib.OpenDB(mustConnConfig(t, standby.URL()))
		require.NoError(t, onStandby.QueryRow(`SELECT pid FROM pg_stat_wal_receiver`).Scan(&receiver))
		onStandby.Close()
		var before int
		require.NoError(t, onPrimary.QueryRow(`SELECT count(*) FROM webhook_event`).Scan(&before))
		require.NoError(t, syscall.Kill(receiver, syscall.SIGSTOP))
		// Asynchronous: the primary goes on committing and acknowledging.
		// Synchronous: its commits wait for the standby, and time out as 503s.
		progress := `SELECT count(*) >= $1 FROM webhook_event`
		if synchronous {
			progress = `SELECT count(*) >= 4 + 0 * $1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'`
		}
		dbtest.Eventually(t, func() bool {
			var ok bool
			return onPrimary.QueryRow(progress, before+150).Scan(&ok) == nil && ok
		}, "the primary goes on past the standby")
	}
	onPrimary.Close()
	require.NoError(t, primary.Stop(ctx, "immediate"))
	if receiver != 0 {
		// What the receiver had not written is gone with it; the standby
		// restarts its recovery from its own WAL.
		require.NoError(t, syscall.Kill(receiver, syscall.SIGKILL))
	}

	probe := []byte(`{"id":"evt_failover_gap","type":"x"}`)
	h, _ := provider.Stripe.Sign(providerSecrets["stripe"], provider.Delivery{Body: probe})
	code := post(t, "http://"+p.addr+"/webhooks/stripe", probe, h)
	require.Equal(t, http.StatusServiceUnavailable, code, "no primary: 503 so the provider retries")

	require.NoError(t, standby.Promote(ctx))
	reports := wait()
	newURL, err := devdb.WithDatabase(standby.URL(), "hookledger")
	require.NoError(t, err)
	db := stdlib.OpenDB(mustConnConfig(t, newURL))
	t.Cleanup(func() { db.Close() })
	var gap int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM webhook_event WHERE event_id = 'evt_failover_gap'`).Scan(&gap))
	require.Zero(t, gap, "the delivery answered 503 wrote nothing")
	return db, prefix, reports
}

// settled waits until every claimed event is settled.
func settled(t *testing.T, db *sql.DB) {
	t.Helper()
	if !assertEventually(func() bool {
		var pending int
		return db.QueryRow(`SELECT count(*) FROM webhook_event WHERE status <> 'settled'`).Scan(&pending) == nil && pending == 0
	}, 150*time.Second) {
		dumpPending(t, db)
		t.Fatal("every claimed event settles")
	}
}
