package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/app"
	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/testsupport/devdb"
)

func devCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "dev",
		Short: "Serve against a local PostgreSQL with development defaults",
		Long: `Serve every role with development defaults: console logs with a live
feed of claims and applies, 127.0.0.1:8080 when HTTP_ADDR is unset, the
public Stripe secret whsec_hookledger_dev when no provider secret is set
(hookledger serve refuses it), and DATABASE_URL, else a local PostgreSQL, else a
throwaway cluster started in .pgdata/. Migrates first. Send it test events
with 'hookledger trigger TYPE'.`,
		Args: app.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
}

// runDev serves with development defaults. It takes the port before
// anything else, so a port in use is the first thing it reports.
func runDev(ctx context.Context, stdout, stderr io.Writer) error {
	cfg, err := config.LoadDev()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s is already in use (another hookledger dev?): stop it, or set HTTP_ADDR, e.g. HTTP_ADDR=:8081", cfg.HTTPAddr)
	}
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
	}
	defer ln.Close()
	if cfg.DatabaseURL == "" {
		url, err := devDatabase(ctx, stderr)
		if err != nil {
			return err
		}
		cfg.DatabaseURL = config.Secret(url)
	}
	return app.Dev(ctx, cfg, ln, stdout, stderr)
}

func devDBCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "devdb",
		Short: "Print the development database's URL",
		Long: `Print DATABASE_URL, else the URL of the development database on a local
PostgreSQL or the throwaway cluster (started when needed).`,
		Args: app.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.LoadDev()
			if err != nil {
				return fmt.Errorf("configuration:\n%w", err)
			}
			url := cfg.DatabaseURL.Reveal()
			if url == "" {
				if url, err = devDatabase(cmd.Context(), cmd.ErrOrStderr()); err != nil {
					return err
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), url)
			return nil
		},
	}
}

// devDatabase is the database hookledger in the development database
// server: a local PostgreSQL, else the throwaway cluster.
func devDatabase(ctx context.Context, stderr io.Writer) (string, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	admin, err := devdb.Server(ctx, "", logf)
	if err != nil {
		return "", err
	}
	return devdb.EnsureDatabase(ctx, admin, "hookledger")
}
