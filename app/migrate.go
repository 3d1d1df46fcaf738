package app

import (
	"context"
	"database/sql"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/hookledger/hookledger/migrations"
)

// migrate runs one migrate subcommand against databaseURL.
func migrate(ctx context.Context, databaseURL, cmd string, all bool, stdout io.Writer) error {
	cfg, err := pgxConnConfig(databaseURL)
	if err != nil {
		return err
	}
	open := func() *sql.DB { return stdlib.OpenDB(*cfg) }
	switch cmd {
	case "up":
		if err := migrations.Up(open()); err != nil {
			return err
		}
	case "down":
		if err := migrations.Down(open(), all); err != nil {
			return err
		}
	case "status":
	default:
		return fmt.Errorf("%w: migrate %s: want up, down or status", errUsage, cmd)
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
