package devdb_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/devdb"
)

// TestThrowawayCluster is the fresh-machine path: a cluster of our own from
// the installed binaries, stopped abruptly and started again.
func TestThrowawayCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	parent, err := os.MkdirTemp("", "hookledger-devdb-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(parent, 0o755)) // the postgres user must reach it when we run as root
	t.Cleanup(func() { os.RemoveAll(parent) })

	// A free port, not a fixed one: two test runs at once must not meet.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	c, err := devdb.NewCluster(filepath.Join(parent, "data"), port)
	require.NoError(t, err)
	ctx := context.Background()
	require.False(t, c.Initialized())
	require.NoError(t, c.Init(ctx))
	require.True(t, c.Initialized())
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { _ = c.Stop(context.Background(), "immediate") })

	url, err := devdb.EnsureDatabase(ctx, c.URL(), "hookledger_x")
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE TABLE t (id int)`)
	require.NoError(t, err)
	conn.Close(ctx)

	require.NoError(t, c.Stop(ctx, "immediate"))
	_, err = pgx.Connect(ctx, url)
	require.Error(t, err, "stopped")
	require.NoError(t, c.Start(ctx))
	conn, err = pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n))
	require.NoError(t, devdb.DropDatabase(ctx, c.URL(), "hookledger_y"))
}
