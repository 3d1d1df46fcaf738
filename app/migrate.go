package app

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/migrations"
)

func migrateCommand(t terminal) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate up|down|status",
		Short: "Run the embedded migrations (River's tables included)",
		Long: `Run hookledger's golang-migrate migrations, embedded in the binary, on
DATABASE_URL. Each subcommand first prints the database it works on, with
the password hidden.`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	up := migrateStep("up", "Apply every pending migration")
	var all bool
	var bulk bulkFlags
	down := &cobra.Command{
		Use:   "down [--all] [--dry-run] [--yes]",
		Short: "Revert one migration (--all: every one)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			url, err := migrateDatabase()
			if err != nil {
				return err
			}
			return migrateDown(cmd.Context(), t, url, all, bulk)
		},
	}
	down.Flags().BoolVar(&all, "all", false, "revert every migration: drops every hookledger and River table")
	bulk.register(down, "print which migrations would be reverted, and change nothing")
	status := migrateStep("status", "Print the current version and whether it is dirty")
	cmd.AddCommand(up, down, status)
	return cmd
}

// migrateStep is a migrate subcommand without flags.
func migrateStep(name, short string) *cobra.Command {
	return &cobra.Command{
		Use:   name,
		Short: short,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			url, err := migrateDatabase()
			if err != nil {
				return err
			}
			return migrate(cmd.Context(), url, name, false, cmd.OutOrStdout())
		},
	}
}

// migrateDatabase is DATABASE_DIRECT_URL when set, else DATABASE_URL,
// checked.
func migrateDatabase() (string, error) {
	cfg, err := config.Load()
	if err != nil {
		return "", fmt.Errorf("configuration:\n%w", err)
	}
	if err := cfg.RequireDatabase(); err != nil {
		return "", err
	}
	if cfg.DatabasePooler == config.PoolerTransaction && cfg.DatabaseDirectURL == "" {
		return "", errors.New("DATABASE_POOLER=transaction: migrations hold a session-level lock that a transaction pooler cannot keep; set DATABASE_DIRECT_URL to PostgreSQL itself")
	}
	return cfg.MigrationURL(), nil
}

// migrateDown reverts one step, or every step with all, after showing the
// count and asking when it is more than one.
func migrateDown(ctx context.Context, t terminal, url string, all bool, bulk bulkFlags) error {
	cfg, err := pgxConnConfig(url)
	if err != nil {
		return err
	}
	st, err := migrations.CurrentStatus(stdlib.OpenDB(*cfg))
	if err != nil {
		return err
	}
	steps := int64(0)
	if st.Version > 0 {
		steps = 1
		if all {
			steps = appliedSteps(st.Version)
		}
	}
	fmt.Fprintf(t.out, "database %s: at version %d; down reverts %d migration(s)\n", config.RedactURL(url), st.Version, steps)
	if bulk.dryRun || steps == 0 {
		return nil
	}
	if err := bulk.confirm(t, steps, fmt.Sprintf("revert %d migrations of %s, dropping their tables and data", steps, config.RedactURL(url))); err != nil {
		return err
	}
	return migrate(ctx, url, "down", all, t.out)
}

// appliedSteps counts the embedded migrations up to version.
func appliedSteps(version uint) int64 {
	names, _ := fs.Glob(migrations.FS, "*.up.sql")
	n := int64(0)
	for _, name := range names {
		prefix, _, _ := strings.Cut(name, "_")
		if v, err := strconv.ParseUint(prefix, 10, 64); err == nil && uint(v) <= version {
			n++
		}
	}
	return n
}

// migrate runs one migrate subcommand against databaseURL, naming the
// database first.
func migrate(ctx context.Context, databaseURL, cmd string, all bool, stdout io.Writer) error {
	cfg, err := pgxConnConfig(databaseURL)
	if err != nil {
		return err
	}
	open := func() *sql.DB { return stdlib.OpenDB(*cfg) }
	switch cmd {
	case "up":
		fmt.Fprintf(stdout, "database %s: applying pending migrations\n", config.RedactURL(databaseURL))
		if err := migrations.Up(open()); err != nil {
			return err
		}
	case "down":
		fmt.Fprintf(stdout, "database %s: reverting\n", config.RedactURL(databaseURL))
		if err := migrations.Down(open(), all); err != nil {
			return err
		}
	case "status":
		fmt.Fprintf(stdout, "database %s\n", config.RedactURL(databaseURL))
	default:
		return usageError("migrate %s: want up, down or status", cmd)
	}
	st, err := migrations.CurrentStatus(open())
	if err != nil {
		return err
	}
	state := "current"
	switch {
	case st.Dirty:
		state = "dirty"
	case st.Version != st.Latest:
		state = "pending"
	}
	fmt.Fprintf(stdout, "version %d (latest %d), dirty: %t, %s\n", st.Version, st.Latest, st.Dirty, state)
	return nil
}

func pgxConnConfig(databaseURL string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	return cfg, nil
}
