package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/config"
)

// This file is what hookledger-dev (app/cmd/hookledger-dev) builds on:
// hookledger's command line with the development tools added beside it.
// The tools live in that binary, so hookledger links neither the bench nor
// the throwaway PostgreSQL they start.

// MainWith runs the command line of the program name, hookledger's commands
// and more beside them, and returns the exit code as Main does.
func MainWith(ctx context.Context, name string, args []string, stdout, stderr io.Writer, more ...*cobra.Command) int {
	t := terminal{in: os.Stdin, out: stdout, errOut: stderr, interactive: isTerminal(os.Stdin)}
	root := newRootCommand(t)
	root.Use = name
	for _, c := range more {
		spelledFlags(c)
	}
	root.AddCommand(more...)
	return execute(ctx, root, args, t)
}

// execute runs root with args and maps its error to an exit code, said on
// t.errOut under the program's name.
func execute(ctx context.Context, root *cobra.Command, args []string, t terminal) int {
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errDrift):
		fmt.Fprintf(t.errOut, "%s: %v\n", root.Name(), err)
		return ExitDrift
	case errors.Is(err, errUsage):
		fmt.Fprintf(t.errOut, "%s: %s\n", root.Name(), strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		fmt.Fprintf(t.errOut, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return ExitUsage
	default:
		fmt.Fprintf(t.errOut, "%s: %v\n", root.Name(), err)
		return ExitFailure
	}
}

// UsageError is a command-line mistake: the command exits 2 and points at
// its --help.
func UsageError(format string, a ...any) error { return usageError(format, a...) }

// NoArgs is the positional-argument check of a command that takes none.
func NoArgs(cmd *cobra.Command, args []string) error { return noArgs(cmd, args) }

// Dev migrates the database of cfg up, prints the banner and serves every
// role on ln until ctx ends: `hookledger-dev dev` once it holds its port
// and has a database.
func Dev(ctx context.Context, cfg *config.Config, ln net.Listener, stdout, stderr io.Writer) error {
	if err := migrate(ctx, cfg.DatabaseURL.Reveal(), "up", false, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "hookledger dev: http://%s  database %s  sources %s\n",
		localAddr(ln.Addr().String()), config.RedactURL(cfg.DatabaseURL.Reveal()), sourceNames(cfg))
	fmt.Fprintf(stdout, "send a signed test event:  go tool task trigger -- invoice.paid   (hookledger trigger --list shows every type)\n")
	fmt.Fprintln(stdout, adminBanner(cfg, "http://"+localAddr(ln.Addr().String())))
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && refuseDevSecret(cfg) != nil {
		fmt.Fprintf(stderr, "warning: listening on %s, beyond this machine, with the public Stripe secret %s: anyone who reaches the port can sign events; "+
			"leave HTTP_ADDR unset (%s) or set STRIPE_WEBHOOK_SECRET\n", ln.Addr(), config.DevSecret, config.DevHTTPAddr)
	}
	return serveRole(ctx, cfg, config.RoleAll, ln)
}

// adminBanner is the banner's line of the console and River UI at base:
// their addresses, or how to turn them on.
func adminBanner(cfg *config.Config, base string) string {
	if cfg.AdminToken.Reveal() == "" {
		return fmt.Sprintf("console and River UI are off: set ADMIN_TOKEN to open %s/console/ and %s/riverui/", base, base)
	}
	return fmt.Sprintf("console: %s/console/login   River UI: %s/riverui/jobs?state=retryable   (log in with ADMIN_TOKEN)", base, base)
}

func localAddr(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "127.0.0.1" + addr
	}
	if host, port, err := net.SplitHostPort(addr); err == nil && (host == "::" || host == "0.0.0.0") {
		return "127.0.0.1:" + port
	}
	return addr
}

func sourceNames(cfg *config.Config) string {
	names := make([]string, len(cfg.Sources))
	for i, s := range cfg.Sources {
		names[i] = s.Name
	}
	return strings.Join(names, ",")
}
