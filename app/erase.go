package app

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
)

// eraseReason is the discard reason of a failed event erase puts away.
const eraseReason = "erased (hookledger erase): its payload held an erased subject"

func eraseCommand(t terminal) *cobra.Command {
	var (
		bulk      bulkFlags
		subject   string
		namespace string
	)
	cmd := &cobra.Command{
		Use:   "erase --subject VALUE [--namespace NS] [--dry-run] [--yes]",
		Short: "Erase one subject's data from stored payloads and module rows, keeping dedup",
		Long: `Record VALUE as erased in the namespace (every namespace without
--namespace), by its SHA-256 digest, never the value: from then on drift
reports its rows apart and repairs none, replay and the subscription
re-fetch do not write it back, and the subscription module writes it
redacted. Then replace, in every ledger row whose payload holds VALUE as a
JSON string value (a customer id, an email address), the payload by a
redaction marker and the headers by none, and redact the row's last
error, failure history entries, discard reason and its apply jobs' River
errors that quote it, keeping the row's namespace, event id, type, times,
status and digest: a redelivery of the event stays a duplicate. A failed
event holding it is discarded first (it can no longer be applied); one
being applied right now, or moved back to be applied while erase ran (a
requeue), is left, and the command exits 1 naming it: run it again once
it settles. The rows it says it erased are those its statement changed.
A stored payload no key of PAYLOAD_KEYS opens (payloads check lists them)
cannot be searched: erase passes it by, counts it ("skipped N ...") and
names it on stderr; when what it can still read of such a row (headers,
last error, discard reason, failure history) quotes VALUE, the command
exits 1 naming the row: bring its key back and erase again.

Then every module erases VALUE from its own tables (subscription and
payment redact the customer id and keep the row, usage deletes the
customer's deltas and totals), all modules in one transaction, and the
command prints how many rows each changed; a module that fails changes
nothing and is named. It lists the rows first (--dry-run prints the same counts and
changes nothing); changing more than one asks on a terminal, and needs
--yes without one.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if subject == "" {
				return usageError("--subject is required")
			}
			ctx := cmd.Context()
			env, err := openOps(ctx)
			if err != nil {
				return err
			}
			defer env.close()
			found, err := env.store.Erase(ctx, subject, namespace, true)
			if err != nil {
				return err
			}
			modules, err := env.store.EraseModules(ctx, env.registry, subject, namespace, true)
			if err != nil {
				return err
			}
			var failed []ledger.EraseMatch
			for _, m := range found.Pending {
				if m.Status == string(webhookevent.StatusFailed) {
					failed = append(failed, m)
				}
			}
			events, rows := int64(len(found.Rows)+len(failed)), moduleRows(modules)
			if bulk.dryRun {
				printErasable(t, found)
				fmt.Fprintf(t.out, "would erase %d event payload(s)\n", events)
				printModuleRows(t, modules, "would erase")
				// A dry run lists; the rows it could not read are named, and
				// the run that erases fails on those that may hold the subject.
				_ = printSkipped(t, found)
				return nil
			}
			if err := bulk.confirm(t, events+rows, fmt.Sprintf("erase the payloads of %d event(s) and %d module row(s)", events, rows)); err != nil {
				return err
			}
			for _, m := range failed {
				if _, err := env.store.Discard(ctx, m.Namespace, m.EventID, eraseReason); err != nil {
					return fmt.Errorf("discard %s/%s before erasing it: %w", m.Namespace, m.EventID, err)
				}
			}
			// The ledger first: an event it finds settled has written its
			// rows, which the modules then erase; one it finds pending may
			// write them later, and makes the command fail, to be run again.
			done, err := env.store.Erase(ctx, subject, namespace, false)
			if err != nil {
				return err
			}
			fmt.Fprintf(t.out, "erased %d event payload(s); their redeliveries stay duplicates\n", len(done.Rows))
			if modules, err = env.store.EraseModules(ctx, env.registry, subject, namespace, false); err != nil {
				return err
			}
			printModuleRows(t, modules, "erased")
			skipped := printSkipped(t, done)
			if len(done.Pending) > 0 {
				for _, m := range done.Pending {
					fmt.Fprintf(t.errOut, "not erased: %s/%s is %s; run erase again once it settles\n", m.Namespace, m.EventID, m.Status)
				}
				return fmt.Errorf("%d event(s) holding the subject are being applied", len(done.Pending))
			}
			return skipped
		},
	}
	cmd.Flags().StringVar(&subject, "subject", "", "the value to erase, as it appears in payloads (a customer id, an email address)")
	cmd.Flags().StringVar(&namespace, "namespace", "", "only this ledger namespace")
	bulk.register(cmd, "list the events and count the module rows that hold the subject, and change nothing")
	return cmd
}

// moduleRows is how many rows the modules erased, or would.
func moduleRows(ms []ledger.ModuleErasure) int64 {
	var n int64
	for _, m := range ms {
		n += m.Rows
	}
	return n
}

// printModuleRows prints a line per module: "module subscription: erased 1
// row(s)".
func printModuleRows(t terminal, ms []ledger.ModuleErasure, verb string) {
	for _, m := range ms {
		fmt.Fprintf(t.out, "module %s: %s %d row(s)\n", m.Module, verb, m.Rows)
	}
}

// skippedLines bounds the lines printSkipped writes, one per row.
const skippedLines = 20

// printSkipped says which rows erase could not read (their payload no key
// opens): a count on stdout, the rows on stderr. It returns an error when
// one of them may hold the subject (ledger.EraseReport.Quoting).
func printSkipped(t terminal, r ledger.EraseReport) error {
	if len(r.Unreadable) == 0 {
		return nil
	}
	fmt.Fprintf(t.out, "skipped %d stored payload(s) no key opens: not searched for the subject; hookledger payloads check lists them\n", len(r.Unreadable))
	for i, u := range r.Unreadable {
		if i == skippedLines {
			fmt.Fprintf(t.errOut, "not searched: %d more\n", len(r.Unreadable)-i)
			break
		}
		fmt.Fprintf(t.errOut, "not searched: %s/%s (key %s, %s)\n", u.Namespace, u.EventID, u.KeyID, u.Reason)
	}
	for _, k := range r.Quoting {
		fmt.Fprintf(t.errOut, "cannot erase: %s/%s may hold the subject: its payload no key opens and its other columns quote it; bring its key back to PAYLOAD_KEYS and erase again\n", k.Namespace, k.EventID)
	}
	if len(r.Quoting) > 0 {
		return fmt.Errorf("%d event(s) that may hold the subject could not be read", len(r.Quoting))
	}
	return nil
}

// printErasable lists the rows a dry run found.
func printErasable(t terminal, r ledger.EraseReport) {
	w := tabwriter.NewWriter(t.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tEVENT ID\tTYPE\tSTATUS\tRECEIVED")
	for _, rows := range [][]ledger.EraseMatch{r.Rows, r.Pending} {
		for _, m := range rows {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.Namespace, m.EventID, m.Type, m.Status, m.ReceivedAt.UTC().Format(time.RFC3339))
		}
	}
	w.Flush()
}
