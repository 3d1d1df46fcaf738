package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

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

// usageError wraps err as a command-line mistake.
func usageError(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

// terminal is what a command may know about where it runs.
type terminal struct {
	in          io.Reader
	out, errOut io.Writer
	// interactive reports whether a person can answer a question on in.
	interactive bool
}

// Main runs the hookledger command line and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return run(ctx, args, terminal{in: os.Stdin, out: stdout, errOut: stderr, interactive: isTerminal(os.Stdin)})
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

func run(ctx context.Context, args []string, t terminal) int {
	return execute(ctx, newRootCommand(t), args, t)
}

// newRootCommand builds the whole command tree.
func newRootCommand(t terminal) *cobra.Command {
	root := &cobra.Command{
		Use:   "hookledger",
		Short: "An idempotent webhook receiver",
		Long: `hookledger verifies webhooks, claims every event exactly once in PostgreSQL,
applies it to business state in order, and pulls back events it missed.

Configuration comes from the environment (DATABASE_URL, HTTP_ADDR, the
provider secrets ...) and HOOKLEDGER_CONFIG; see docs/configuration.md.`,
		Version:           buildVersion().String(),
		SilenceUsage:      true,
		SilenceErrors:     true,
		Args:              cobra.ArbitraryArgs,
		RunE:              groupRun,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
	}
	root.SetIn(t.in)
	root.SetOut(t.out)
	root.SetErr(t.errOut)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError("%v", err) })
	root.AddCommand(
		serveCommand(),
		migrateCommand(t),
		verifyCommand(),
		ipsCommand(),
		replayCommand(),
		driftCommand(t),
		eventsCommand(t),
		failuresCommand(t),
		pruneCommand(t),
		eraseCommand(t),
		payloadsCommand(),
		redisCommand(t),
		triggerCommand(),
		simulateCommand(),
		versionCommand(),
		healthcheckCommand(),
	)
	spelledFlags(root)
	return root
}

// spelledFlags drops cobra's "[flags]" from c's and its subcommands' usage
// lines: every Use line spells its flags.
func spelledFlags(c *cobra.Command) {
	c.DisableFlagsInUseLine = true
	for _, sub := range c.Commands() {
		spelledFlags(sub)
	}
}

// groupRun is the run function of a command that only holds subcommands:
// without one it is a usage error, and an unknown one is named.
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		cmd.SetOut(cmd.ErrOrStderr())
		_ = cmd.Help()
		return usageError("%s: name a command", commandName(cmd))
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return usageError("%s", msg)
}

// commandName is the command's path without the program's name.
func commandName(cmd *cobra.Command) string {
	if !cmd.HasParent() {
		return cmd.Name()
	}
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// noArgs, exactArgs and rangeArgs are cobra's validators with usage errors.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError("%s takes no arguments, got %q", commandName(cmd), strings.Join(args, " "))
	}
	return nil
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError("%s takes %s, got %d argument(s)", commandName(cmd), what, len(args))
		}
		return nil
	}
}

func serveCommand() *cobra.Command {
	var role string
	cmd := &cobra.Command{
		Use:   "serve [--role=all|http|worker]",
		Short: "Receive webhooks and apply them",
		Long: `Serve the HTTP receiver and the River workers. Every role listens on
HTTP_ADDR for /healthz, /readyz and /metrics; only all and http take
webhooks, only all and worker work jobs.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := config.Role(role)
			if r != config.RoleAll && r != config.RoleHTTP && r != config.RoleWorker {
				return usageError("--role=%s: want all, http or worker", role)
			}
			cfg, err := config.Load()
			if err != nil {
				return fmt.Errorf("configuration:\n%w", err)
			}
			return serve(cmd.Context(), cfg, r, nil)
		},
	}
	cmd.Flags().StringVar(&role, "role", string(config.RoleAll), "all, http or worker")
	_ = cmd.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"all", "http", "worker"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and VCS revision of this build",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), buildVersion())
			return nil
		},
	}
}
