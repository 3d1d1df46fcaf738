package app

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

func redisCommand(t terminal) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "redis",
		Short: "Manage the Redis short-circuit's markers",
		Args:  noArgs,
		RunE:  groupRun,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "forget",
		Short: "Make every Redis marker written so far unread, by renewing the ledger's identity",
		Long: `Renew the ledger's identity (the ledger_identity row), which every Redis
marker key carries: processes started afterwards read none of the markers
written before, so a marker can never answer "duplicate" for an event this
database does not hold. Run it after restoring the database from a backup,
after a failover that may have lost acknowledged events, or after cloning a
database that shares a REDIS_URL and REDIS_KEY_PREFIX with its source; then
start (or restart) the servers. It needs DATABASE_URL, not Redis: the old
markers expire on their own within REDIS_TTL.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			env, err := openOps(ctx)
			if err != nil {
				return err
			}
			defer env.close()
			id, err := ledger.RenewIdentity(ctx, env.db)
			if err != nil {
				return err
			}
			fmt.Fprintf(t.out, "ledger identity renewed (%s…): restart the servers; earlier Redis markers are no longer read\n", id[:8])
			return nil
		},
	})
	return cmd
}
