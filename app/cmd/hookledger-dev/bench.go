package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/app"
	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/testsupport/bench"
)

func benchRedisCommand() *cobra.Command {
	var o bench.StormOptions
	cmd := &cobra.Command{
		Use:   "bench-redis [--events N] [--deliveries D] [--clients C] [--group-commit=false] [--redis-url URL]",
		Short: "Measure a duplicate storm with and without the Redis short-circuit",
		Long: `Deliver every event D times (a retry storm) from C keep-alive clients, first
to a service without Redis, then to one with REDIS_URL, each on a database
of its own, and report the database's transactions per delivery (applies
and River's own work included), the ingest rate and the latency. Redis is
REDIS_URL when set, else --redis-url; keys get a prefix of this run's own;
REDIS_TIMEOUT applies.`,
		Args: app.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Events < 1 || o.Deliveries < 1 || o.Clients < 1 {
				return app.UsageError("--events, --deliveries and --clients must be positive")
			}
			return bench.Storm(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&o.Events, "events", 2000, "distinct events")
	fl.IntVar(&o.Deliveries, "deliveries", 10, "deliveries of each event")
	fl.IntVar(&o.Clients, "clients", 64, "concurrent keep-alive clients")
	fl.BoolVar(&o.GroupCommit, "group-commit", true, "run the service with group commit")
	fl.StringVar(&o.RedisURL, "redis-url", "redis://127.0.0.1:6379", "Redis for the second run, when REDIS_URL is unset")
	return cmd
}

func benchCommand() *cobra.Command {
	var o bench.Options
	var serveReference string
	cmd := &cobra.Command{
		Use:   "bench [--events N] [--clients C] [--mix] [--storage] [--group-commit=false] [--workers W] [--ledger-rows N] [--prune-rows N] [--kept-keys K] [--sealed]",
		Short: "Measure ingest and end-to-end rates on real payloads against plain SQL and the reference design",
		Long: `Measure the service on real provider payloads against the strongest plain
versions of the alternative, all in one run: a one-transaction claim in plain
SQL on hookledger's schema, the reference design, and the database's batched
ceiling; then ingest, end-to-end, latency at peak and half rate, CPU per
1,000 events and peak RSS, on a database of its own.

With --ledger-rows N the run then seeds the ledger with N realistic rows
(90 days of mixed providers' events, a fifth in the last day, nearly all
settled, some failed) and measures ingest, end-to-end and the apply's CPU
again on it and once more on the ledger emptied (the ratios take the mean
of the empty ledger before and after), and times every operator page
(console, admin API, /metrics) on the empty and on the seeded ledger.

Without --mix the run also measures the reference design as a whole service
(its receiver and as many workers as the service's), as a process of its
own, against hookledger's peak. After the main phases, each with its own
control: --kept-keys K measures ingest alone with webhook_key empty, holding
K keys, and empty again; --sealed measures the service at peak with
plaintext payloads and then with PAYLOAD_KEYS set; --prune-rows N seeds N
settled rows older than RETENTION and measures ingest latency without prune
and while "hookledger-dev prune --yes" runs.`,
		Args: app.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if serveReference != "" {
				cfg, err := config.LoadDev()
				if err != nil {
					return fmt.Errorf("configuration:\n%w", err)
				}
				return bench.ServeReference(cmd.Context(), cfg.DatabaseURL.Reveal(), serveReference, bench.Secret, o.Workers, o.Workers+o.Clients/2+8)
			}
			if o.Events < 1 || o.Events > bench.PhaseEvents {
				return app.UsageError("--events must be between 1 and %d", bench.PhaseEvents)
			}
			if o.LedgerRows < 0 || (o.LedgerRows > 0 && o.Storage) {
				return app.UsageError("--ledger-rows must be 0 or positive, and is not measured with --storage")
			}
			if o.PruneRows < 0 || o.KeptKeys < 0 || ((o.PruneRows > 0 || o.KeptKeys > 0 || o.Sealed) && o.Storage) {
				return app.UsageError("--prune-rows and --kept-keys must be 0 or positive, and they and --sealed are not measured with --storage")
			}
			return bench.Run(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&o.Events, "events", 10000, "events per phase")
	fl.IntVar(&o.Clients, "clients", 64, "concurrent keep-alive clients (and baseline connections)")
	fl.BoolVar(&o.GroupCommit, "group-commit", true, "run the service with group commit")
	fl.IntVar(&o.Workers, "workers", config.DefaultWorkers, "apply workers of the service")
	fl.BoolVar(&o.Mix, "mix", false, "send a mix of providers' real payloads, not only Stripe's customer.subscription.updated")
	fl.IntVar(&o.Batch, "batch", 50, "rows per statement of the batched ceiling")
	fl.IntVar(&o.BatchClients, "batch-clients", 4, "connections of the batched ceiling")
	fl.BoolVar(&o.Storage, "storage", false, "measure only the payload storage layouts (jsonb, text, bytea; pglz, lz4)")
	fl.StringVar(&o.Testdata, "testdata", "testdata/providers", "folder of the real provider payloads")
	fl.IntVar(&o.LedgerRows, "ledger-rows", 0, "then seed the ledger with this many rows and measure the service and the operator pages on it (0: not)")
	fl.IntVar(&o.PruneRows, "prune-rows", 0, "then seed this many rows older than RETENTION and measure ingest latency with and without prune (0: not)")
	fl.IntVar(&o.KeptKeys, "kept-keys", 0, "then measure ingest with webhook_key empty and holding this many kept keys (0: not)")
	fl.BoolVar(&o.Sealed, "sealed", false, "then measure the service with plaintext and with sealed payloads (PAYLOAD_KEYS)")
	fl.StringVar(&serveReference, "serve-reference", "", "run the reference design's service on this address (the bench starts it)")
	_ = fl.MarkHidden("serve-reference")
	return cmd
}
