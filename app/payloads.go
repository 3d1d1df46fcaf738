package app

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

func payloadsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "payloads",
		Short: "Manage the encryption of stored payloads (PAYLOAD_KEYS)",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(payloadsCheckCommand(), &cobra.Command{
		Use:   "rekey",
		Short: "Seal every stored payload with the first key of PAYLOAD_KEYS",
		Long: `Re-encrypt, in batches, every stored payload that is plaintext (stored
before PAYLOAD_KEYS was set) or sealed by another key than the first of
PAYLOAD_KEYS (after a rotation). It can be stopped and run again: it takes
only what is not yet under the first key. A payload no key opens (its key
is not in PAYLOAD_KEYS, or it was altered) is left as it is and counted
("skipped N ..."; payloads check lists them); the exit code is 0 once the
rest is sealed. Once it has run, a key that is no longer first can be
removed from PAYLOAD_KEYS.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			env, err := openOps(ctx)
			if err != nil {
				return err
			}
			defer env.close()
			if env.sealer == nil {
				return usageError("PAYLOAD_KEYS is not set: there is no key to seal with")
			}
			r, err := env.store.Rekey(ctx)
			if r.Sealed > 0 || err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "sealed %d payload(s) with key %s\n", r.Sealed, env.sealer.SealingKeyID())
			}
			if len(r.Unreadable) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "skipped %d stored payload(s) no key opens (%s); hookledger payloads check lists them\n",
					len(r.Unreadable), byKey(ledger.SealedCheck{Unreadable: r.Unreadable}.UnreadableByKey()))
			}
			return err
		},
	})
	return cmd
}

// errUnreadable marks a payloads check that found payloads no key opens:
// it exits ExitDrift (3), as a drift check that found drift does.
type errUnreadable int

func (e errUnreadable) Error() string {
	return fmt.Sprintf("%d stored payload(s) no key opens", int(e))
}

func (errUnreadable) Is(target error) bool { return target == errDrift }

func payloadsCheckCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check [--json]",
		Short: "List the stored payloads no key of PAYLOAD_KEYS opens",
		Long: `Open every stored sealed payload and list those no key of PAYLOAD_KEYS
opens, with the event, the key id the payload names and why: unknown_key
(sealed by a key PAYLOAD_KEYS lacks: a restored backup, a key removed
before rekey reached the row; it opens once the key is back) or corrupt
(its key is configured but the payload was altered, cut or moved from
another row). Such an event fails to apply, with the reason, and erase and
payloads rekey pass it by. --json prints {"checked", "sealed",
"unreadable_by_key", "unreadable": [{"namespace", "event_id", "key_id",
"reason"}]}. Exit 0 when every payload opens, 3 when some do not, 1 on an
error.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			env, err := openOps(ctx)
			if err != nil {
				return err
			}
			defer env.close()
			c, err := env.store.CheckSealed(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				unreadable := c.Unreadable
				if unreadable == nil {
					unreadable = []ledger.UnreadablePayload{}
				}
				if err := enc.Encode(map[string]any{"checked": c.Checked, "sealed": c.Sealed,
					"unreadable_by_key": c.UnreadableByKey(), "unreadable": unreadable}); err != nil {
					return err
				}
			} else {
				printUnreadable(cmd.OutOrStdout(), c)
			}
			if len(c.Unreadable) > 0 {
				return errUnreadable(len(c.Unreadable))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

// printUnreadable prints the payloads no key opens, a line each, and a
// summary line.
func printUnreadable(out io.Writer, c ledger.SealedCheck) {
	if len(c.Unreadable) == 0 {
		fmt.Fprintf(out, "checked %d stored payload(s), %d sealed: every one opens\n", c.Checked, c.Sealed)
		return
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tEVENT ID\tKEY ID\tREASON")
	for _, u := range c.Unreadable {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", u.Namespace, u.EventID, u.KeyID, u.Reason)
	}
	w.Flush()
	fmt.Fprintf(out, "%d of %d sealed payload(s) cannot be opened (%s); %d stored payload(s) checked\n",
		len(c.Unreadable), c.Sealed, byKey(c.UnreadableByKey()), c.Checked)
}

// byKey writes counts by key id: "key deadbeef: 1, key 0a1b2c3d: 2".
func byKey(counts map[string]int) string {
	parts := make([]string, 0, len(counts))
	for _, id := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("key %s: %d", id, counts[id]))
	}
	return strings.Join(parts, ", ")
}
