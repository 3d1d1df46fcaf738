package devdb

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Standby makes a streaming standby of c in dir, listening on port: a base
// backup taken over replication with the recovery settings written
// (pg_basebackup -R). The failover tests start it, kill c and promote it.
func (c *Cluster) Standby(ctx context.Context, dir string, port int) (*Cluster, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	if os.Geteuid() == 0 {
		if err := chownPostgres(dir); err != nil {
			return nil, err
		}
	}
	// pg_basebackup sits beside the real pg_ctl, which PATH may only link to.
	tools := *c
	if real, err := filepath.EvalSymlinks(filepath.Join(c.bin, "pg_ctl")); err == nil {
		tools.bin = filepath.Dir(real)
	}
	err := tools.run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "postgres",
		"-D", dir, "-R", "-X", "stream", "--checkpoint=fast", "--no-sync")
	if err != nil {
		return nil, fmt.Errorf("base backup of %s: %w", c.Dir, err)
	}
	return &Cluster{Dir: dir, Port: port, bin: c.bin}, nil
}

// Promote ends a standby's recovery and makes it a primary, waiting until
// it accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	return c.run(ctx, "pg_ctl", "-D", c.Dir, "-w", "promote")
}
