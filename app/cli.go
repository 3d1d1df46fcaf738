package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/hookledger/hookledger/config"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// errUsage marks a command-line mistake (exit 2).
var errUsage = errors.New("usage")

const usageText = `hookledger: an idempotent webhook receiver

Usage:
  hookledger serve [--role=all|http|worker]   receive webhooks and apply them
  hookledger migrate up|down [--all]|status    run the embedded migrations
  hookledger verify --provider P --secret S [--header 'Name: value']... --body-file F [--at UNIX] [--tolerance D]
                                               check one delivery's signature offline (exit 0 valid, 1 invalid, 2 usage)
  hookledger replay stripe|paddle --since T [--until T] [--types a,b] [--failed-only] [--target URL]
  hookledger replay github --repo owner/name --hook ID --since T [--dry-run]
                                               pull missed events back from the provider's API
  hookledger events list [--status S] [--source S] [--type T] [--since T] [--until T] [--limit N] [--json]
  hookledger events show EVENT_ID [--namespace NS]
  hookledger events requeue EVENT_ID | [--status failed] | --force [--since T] [--until T] [--type T] [--dry-run]
  hookledger prune [--dry-run]                 delete settled events older than RETENTION
  hookledger dev                               serve against a local PostgreSQL, for development
  hookledger send [--url URL] [--type T]       send one signed Stripe test event
  hookledger simulate [--provider P] [--events N] [--duplicates F] [--reorder F] [--rate R] [--concurrency C]
                                               play a provider: signed events, duplicates, reordering, retries
  hookledger bench [--events N] [--clients C] [--mix] [--storage] [--group-commit=false] [--workers N]
                                               measure ingest and end-to-end rates on real payloads against plain SQL
  hookledger devdb                             print the URL of the development database

Configuration comes from the environment; see README.md.
`

// Main runs the hookledger command line and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return ExitUsage
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		err = cmdServe(ctx, rest, stderr)
	case "migrate":
		err = cmdMigrate(ctx, rest, stdout, stderr)
	case "dev":
		err = cmdDev(ctx, rest, stdout, stderr)
	case "send":
		err = cmdSend(ctx, rest, stdout, stderr)
	case "verify":
		err = cmdVerify(ctx, rest, stdout, stderr)
	case "bench":
		err = cmdBench(ctx, rest, stdout, stderr)
	case "simulate":
		err = cmdSimulate(ctx, rest, stdout, stderr)
	case "replay":
		err = cmdReplay(ctx, rest, stdout, stderr)
	case "events":
		err = cmdEvents(ctx, rest, stdout, stderr)
	case "prune":
		err = cmdPrune(ctx, rest, stdout, stderr)
	case "devdb":
		err = cmdDevDB(ctx, rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usageText)
		return ExitOK
	default:
		fmt.Fprintf(stderr, "hookledger: unknown command %q\n\n%s", cmd, usageText)
		return ExitUsage
	}
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "hookledger: %v\n", err)
		return ExitUsage
	default:
		fmt.Fprintf(stderr, "hookledger: %v\n", err)
		return ExitFailure
	}
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("hookledger "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

func cmdServe(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
	role := fs.String("role", string(config.RoleAll), "all, http or worker")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	r := config.Role(*role)
	if r != config.RoleAll && r != config.RoleHTTP && r != config.RoleWorker {
		return fmt.Errorf("%w: --role=%s: want all, http or worker", errUsage, *role)
	}
	cfg, err := config.Load()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	return serve(ctx, cfg, r)
}

func serve(ctx context.Context, cfg *config.Config, role config.Role) error {
	log, err := NewLogger(cfg)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	a, err := New(ctx, cfg, log, role)
	if err != nil {
		return err
	}
	defer a.Close()
	return a.Run(ctx)
}

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: migrate up|down [--all]|status", errUsage)
	}
	fs := newFlags("migrate "+args[0], stderr)
	all := fs.Bool("all", false, "with down: revert every migration")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	cfg, err := config.Load()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	if err := cfg.RequireDatabase(); err != nil {
		return err
	}
	return migrate(ctx, cfg.DatabaseURL.Reveal(), strings.ToLower(args[0]), *all, stdout)
}
