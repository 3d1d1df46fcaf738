package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/operations/console"
	"github.com/hookledger/hookledger/modules/operations/failure"
)

func failuresCommand(t terminal) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "failures [--json] | failures requeue GROUP | failures discard GROUP --reason TEXT",
		Short: "Failed events grouped by cause, and actions on a whole group",
		Long: `List the failed events grouped by source, the module.handler that failed and
the error with its variable parts (ids, numbers, quoted values) normalised,
the largest group first: its id, count, first and last failure, a sample
event and River's next automatic retry among its newest failures. A group's
id is a hash of what it is grouped by, so the same cause keeps its id.

--json prints a list of groups: id, count, source, handler, error,
sample_error, first_failed_at, last_failed_at, sample_event_id,
sample_namespace, next_retry_at.

"failures requeue GROUP" and "failures discard GROUP --reason TEXT" act on
every event of the group, one at a time, through the same requeue and
discard as "hookledger events", and say what each did.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := openOps(cmd.Context())
			if err != nil {
				return err
			}
			defer env.close()
			r, err := failure.New(env.db, env.store).List(cmd.Context())
			if err != nil {
				return err
			}
			return printGroups(cmd.OutOrStdout(), r, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the groups as a JSON list")
	cmd.AddCommand(failuresRequeueCommand(t), failuresDiscardCommand(t))
	return cmd
}

func printGroups(w io.Writer, r failure.Report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r.Groups)
	}
	if len(r.Groups) == 0 {
		fmt.Fprintln(w, "no failed events")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tCOUNT\tSOURCE\tHANDLER\tLAST FAILED\tNEXT RETRY\tSAMPLE\tERROR")
	for _, g := range r.Groups {
		next := "none (requeue)"
		if g.NextRetryAt != nil {
			next = g.NextRetryAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", g.ID, g.Count, g.Source, orDash(g.Handler),
			g.LastFailedAt.Format(time.RFC3339), next, g.SampleEventID, shorten(g.Error, 120))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Truncated {
		fmt.Fprintf(w, "(the groups of the oldest %d failed events; more are failed)\n", failure.MaxScan)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func failuresRequeueCommand(t terminal) *cobra.Command {
	var bulk bulkFlags
	cmd := &cobra.Command{
		Use:   "requeue GROUP [--yes] [--dry-run]",
		Short: "Requeue every failed event of a group",
		Long: `Requeue every failed event of the group (an id "hookledger failures" prints),
one at a time, as "hookledger events requeue" does one: back to claimed and
its apply job runs now. It first says how many events it will touch; more
than one needs a yes on a terminal, or --yes without one. Fix the handler
first, or they fail again. Prints a line per event and the counts.`,
		Example: `  hookledger failures requeue 3f9a1c2b4d5e6f70 --yes`,
		Args:    exactArgs(1, "a group id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return actOnGroup(cmd.Context(), t, args[0], bulk, "requeue", func(g *failure.Groups, keys []ledger.EventKey) (failure.Result, error) {
				return g.Requeue(cmd.Context(), args[0], keys)
			})
		},
	}
	bulk.register(cmd, "list the events it would requeue, and change nothing")
	return cmd
}

func failuresDiscardCommand(t terminal) *cobra.Command {
	var (
		bulk   bulkFlags
		reason string
	)
	cmd := &cobra.Command{
		Use:   "discard GROUP --reason TEXT [--yes] [--dry-run]",
		Short: "Discard every failed event of a group, with the reason",
		Long: `Discard every failed event of the group, one at a time, as "hookledger
events discard" does one: it becomes discarded with the reason, leaves the
backlog, and its River job is cancelled. It first says how many events it
will touch; more than one needs a yes on a terminal, or --yes without one.
An event that settled, or that an apply holds, meanwhile is skipped and
named. "hookledger events requeue --status discarded" brings them back.`,
		Example: `  hookledger failures discard 3f9a1c2b4d5e6f70 --reason "test-mode customer deleted" --yes`,
		Args:    exactArgs(1, "a group id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usageError("--reason is required: say why the events will not be applied")
			}
			return actOnGroup(cmd.Context(), t, args[0], bulk, "discard", func(g *failure.Groups, keys []ledger.EventKey) (failure.Result, error) {
				return g.Discard(cmd.Context(), args[0], keys, reason)
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the events will not be applied (required)")
	bulk.register(cmd, "list the events it would discard, and change nothing")
	return cmd
}

// actOnGroup finds the group's events, says how many it will touch, asks
// for confirmation as every bulk command does, acts on exactly those
// events and prints what it did to each.
func actOnGroup(ctx context.Context, t terminal, id string, bulk bulkFlags, verb string,
	act func(*failure.Groups, []ledger.EventKey) (failure.Result, error)) error {
	env, err := openOps(ctx)
	if err != nil {
		return err
	}
	defer env.close()
	groups := failure.New(env.db, env.store)
	g, keys, err := groups.Find(ctx, id)
	if err != nil {
		return fmt.Errorf("group %s: %w", id, err)
	}
	fmt.Fprintf(t.out, "group %s: %d failed event(s) from %s in %s: %s\n", g.ID, len(keys), g.Source, orDash(g.Handler), g.Error)
	if bulk.dryRun {
		for _, k := range keys {
			fmt.Fprintf(t.out, "would %s %s/%s\n", verb, k.Namespace, k.EventID)
		}
		return nil
	}
	if err := bulk.confirm(t, int64(len(keys)), fmt.Sprintf("%s %d failed event(s)", verb, len(keys))); err != nil {
		return err
	}
	r, err := act(groups, keys)
	for _, o := range r.Events {
		line := fmt.Sprintf("%s/%s: %s", o.Namespace, o.EventID, o.Result)
		if o.Reason != "" {
			line += " (" + o.Reason + ")"
		}
		fmt.Fprintln(t.out, line)
	}
	if err != nil {
		return fmt.Errorf("after %d event(s): %w", len(r.Events), err)
	}
	var counts []string
	for _, k := range slices.Sorted(maps.Keys(r.Counts)) {
		counts = append(counts, fmt.Sprintf("%d %s", r.Counts[k], k))
	}
	fmt.Fprintln(t.out, strings.Join(counts, ", "))
	return nil
}

// consoleFailures hands the failure groups to the console in its own
// types: the console may not import another operations module.
type consoleFailures struct{ groups *failure.Groups }

func (f consoleFailures) Groups(ctx context.Context) ([]console.FailureGroup, bool, error) {
	r, err := f.groups.List(ctx)
	out := make([]console.FailureGroup, len(r.Groups))
	for i, g := range r.Groups {
		out[i] = consoleGroup(g)
	}
	return out, r.Truncated, err
}

func (f consoleFailures) Group(ctx context.Context, id string) (console.FailureGroup, []ledger.EventKey, error) {
	g, keys, err := f.groups.Find(ctx, id)
	if errors.Is(err, failure.ErrUnknownGroup) {
		err = console.ErrUnknownGroup
	}
	return consoleGroup(g), keys, err
}

func (f consoleFailures) Requeue(ctx context.Context, id string, keys []ledger.EventKey) ([]console.GroupOutcome, error) {
	r, err := f.groups.Requeue(ctx, id, keys)
	return consoleOutcomes(r), err
}

func (f consoleFailures) Discard(ctx context.Context, id string, keys []ledger.EventKey, reason string) ([]console.GroupOutcome, error) {
	r, err := f.groups.Discard(ctx, id, keys, reason)
	return consoleOutcomes(r), err
}

func consoleGroup(g failure.Group) console.FailureGroup {
	return console.FailureGroup{ID: g.ID, Count: g.Count, Source: g.Source, Handler: g.Handler, Error: g.Error, SampleError: g.SampleError,
		FirstFailedAt: g.FirstFailedAt, LastFailedAt: g.LastFailedAt, SampleEventID: g.SampleEventID, SampleNamespace: g.SampleNamespace,
		NextRetryAt: g.NextRetryAt}
}

func consoleOutcomes(r failure.Result) []console.GroupOutcome {
	out := make([]console.GroupOutcome, len(r.Events))
	for i, o := range r.Events {
		out[i] = console.GroupOutcome{Namespace: o.Namespace, EventID: o.EventID, Result: o.Result, Reason: o.Reason}
	}
	return out
}
