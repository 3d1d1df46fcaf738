package app_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestSplitRolesThroughPgBouncer runs the split-role scenario with every
// receiver and worker behind PgBouncer in transaction mode
// (DATABASE_POOLER=transaction): one worker polls for jobs, the other
// listens on DATABASE_DIRECT_URL. Every event is claimed once and applied
// once, and PgBouncer carried the transactions.
func TestSplitRolesThroughPgBouncer(t *testing.T) {
	t.Parallel()
	bouncer, err := exec.LookPath("pgbouncer")
	if err != nil {
		t.Skip("pgbouncer not installed (Debian: apt-get install pgbouncer)")
	}
	db := dbtest.New(t)
	pooled, admin := startPgBouncer(t, bouncer, db.URL)
	viaPooler := map[string]string{"DATABASE_URL": pooled, "DATABASE_POOLER": "transaction"}
	listening := map[string]string{"DATABASE_URL": pooled, "DATABASE_POOLER": "transaction", "DATABASE_DIRECT_URL": db.URL}
	runSplitRoles(t, db, viaPooler, viaPooler, listening)

	dbtest.Eventually(t, func() bool { return pgbouncerTransactions(t, admin, db.Name) > 0 }, "the processes' transactions went through PgBouncer")
}

// startPgBouncer runs PgBouncer in transaction mode on a free port in front
// of the server of databaseURL, until the test ends. It returns the URL of
// databaseURL's database through it, and of its admin console.
func startPgBouncer(t *testing.T, bin, databaseURL string) (pooled, admin string) {
	t.Helper()
	u, err := url.Parse(databaseURL)
	require.NoError(t, err)
	// PgBouncer runs as postgres when the test is root: a folder it can
	// reach (t.TempDir's parent is private).
	dir, err := os.MkdirTemp("", "hookledger-pgbouncer-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o777))
	t.Cleanup(func() { os.RemoveAll(dir) })
	port := freePort(t)
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
admin_users = postgres
max_client_conn = 200
default_pool_size = 8
ignore_startup_parameters = extra_float_digits
stats_period = 1
logfile = %s
pidfile = %s
`, u.Hostname(), or(u.Port(), "5432"), port, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	cfg := filepath.Join(dir, "pgbouncer.ini")
	require.NoError(t, os.WriteFile(cfg, []byte(ini), 0o644))
	args := []string{cfg}
	if os.Geteuid() == 0 {
		args = []string{"-u", "postgres", cfg} // PgBouncer refuses to run as root
	}
	cmd := exec.Command(bin, args...)
	out, err := os.Create(filepath.Join(dir, "stdout"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = out, out
	dbtest.DiesWithTest(cmd)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
		out.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Logf("pgbouncer log:\n%s", tail(string(b), 3000))
		}
	})
	base := "postgres://postgres@127.0.0.1:" + strconv.Itoa(port)
	pooled = base + u.Path + "?sslmode=disable"
	admin = base + "/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol"
	dbtest.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return false
		}
		conn.Close(ctx)
		return true
	}, "pgbouncer did not come up")
	return pooled, admin
}

// pgbouncerTransactions is how many transactions PgBouncer has carried for
// database name.
func pgbouncerTransactions(t *testing.T, admin, name string) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SHOW STATS")
	require.NoError(t, err)
	stats, err := pgx.CollectRows(rows, pgx.RowToMap)
	require.NoError(t, err)
	for _, row := range stats {
		if row["database"] != name {
			continue
		}
		n, ok := row["total_xact_count"].(pgtype.Numeric) // the console's numbers come as numeric
		require.True(t, ok, "total_xact_count is %T", row["total_xact_count"])
		v, err := n.Int64Value()
		require.NoError(t, err)
		return v.Int64
	}
	return 0
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
