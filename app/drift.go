package app

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/drift"
	"github.com/hookledger/hookledger/modules/core/intake"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/features/entitlement"
	"github.com/hookledger/hookledger/modules/features/invoice"
	"github.com/hookledger/hookledger/modules/features/payment"
	"github.com/hookledger/hookledger/modules/features/subscription"
)

// ExitDrift is the exit code of a drift check that found drift, or of a
// repair that left some.
const ExitDrift = 3

// errDrift marks drift found (exit 3).
var errDrift = errors.New("drift")

// fixWait bounds how long drift --fix waits for the workers to apply its
// repairs.
const fixWait = time.Minute

// stripeDrift lists the modules whose rows are checked against Stripe:
// one line each.
func stripeDrift(db *sql.DB, api provider.StripeAPI) []drift.Module {
	return []drift.Module{
		&subscription.StripeDrift{DB: db, API: api},
		&payment.StripeDrift{DB: db, API: api},
		&invoice.StripeDrift{DB: db, API: api},
		&entitlement.StripeDrift{DB: db, API: api},
	}
}

// registerDrift schedules the drift check of the stripe source's
// namespace every DRIFT_INTERVAL, when it is set.
func (a *App) registerDrift() {
	if a.cfg.DriftInterval <= 0 {
		return
	}
	api := provider.StripeAPI{Base: a.cfg.StripeAPIBase, Key: a.cfg.StripeAPIKey.Reveal(), HTTP: &http.Client{Timeout: 30 * time.Second}}
	drift.RegisterSchedule(a.registry, drift.ScheduleConfig{
		Provider: "stripe", Namespace: intakeSource(a.cfg, "stripe", "stripe").Namespace, Modules: stripeDrift(a.db, api),
		Interval: a.cfg.DriftInterval, Metrics: a.metrics, Logger: a.log.Named("drift"), Ledger: a.db,
	})
}

func driftCommand(t terminal) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "drift stripe",
		Short: "Compare business rows with the provider's objects, and repair them",
		Long: `Compare the rows hookledger's modules keep (subscriptions, payments,
invoices, entitlements) with the provider's own objects, and report objects
missing here, rows missing at the provider, and fields that differ, with the
row's version and when the provider was asked. Exit 0 when there is no drift, 3 when there is, 1 on
errors, 2 on usage errors.`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	cmd.AddCommand(driftStripeCommand(t))
	return cmd
}

// driftFlags are drift stripe's flags.
type driftFlags struct {
	namespace, since  string
	asJSON, fix, yes  bool
	dryRun            bool
	namespaceExplicit bool
}

func driftStripeCommand(t terminal) *cobra.Command {
	var f driftFlags
	cmd := &cobra.Command{
		Use:   "stripe [--namespace NS] [--since D] [--json] [--fix [--yes] | --dry-run]",
		Short: "Check subscriptions, payments, invoices and entitlements against Stripe's API (needs STRIPE_API_KEY)",
		Long: `Page Stripe's subscriptions, payment intents, invoices and customers (with
each customer's active entitlements: one request per customer), fetch by id
the object of every stored row the pages did not return, and compare each
with its row: status, plan and customer of a subscription; amount, amount
refunded, currency, customer and status of a payment; status, amount due,
amount paid, currency and customer of an invoice; a customer's set of
active features (lookup_key=feature_id). Times are Stripe's: an answer
is dated by its Date header. A row as new as Stripe's answer (an event
applied since Stripe answered) is not compared; a row dated after it by
more than the check took is drift of its own kind, ahead (an event dated
in the future wrote it, and genuine events until then are stale); it is
marked replayed when a replayed event wrote it. A subscription one side
lacks while the other has ended it, a payment intent that did not succeed,
a stored draft invoice Stripe has deleted and a customer without active
features on either side are no drift. A row erase redacted, or an object
that holds an erased subject, is listed apart as erased: not drift, never
repaired.

--since D checks only objects Stripe created and rows written since D (RFC
3339, Unix seconds, or a duration ago). --json prints one JSON document:
{"namespace","checked":{kind:{...,"drifted","erased"}},"drifted":[{"kind",
"id","drift","fields","row_version","row_at","object_at","row_event_id",
"replayed"}],"erased":[...],"repairs":[...]}; drift is one of
missing_here, missing_at_provider, differs, ahead.

--fix repairs through each module's own handlers: Stripe's object is
claimed as a replayed event drift_<object id>_<unix time>, created when
Stripe answered, and applied by the workers under the module's version
guard, so a row an event has moved past Stripe's answer stays as it is;
the command waits up to a minute for the workers and reads each row again.
A repair whose event id was claimed before is reported as duplicate, and
one that holds a subject erased since the check is not claimed. A row
ahead cannot be repaired.
A subscription Stripe does not have is ended (customer.subscription.deleted);
a payment is repaired only where its merge can take it (amounts grow); an
invoice is repaired with an invoice.updated (never an invoice.paid, which
the payment module applies too), and one Stripe does not have is reported,
not deleted; a customer's features are replaced by Stripe's summary
(entitlements.active_entitlement_summary.updated), emptied when Stripe
deleted the customer.
--fix asks on a terminal, and needs --yes without one; --dry-run shows what
it would claim. After --fix the exit code is 0 when nothing drifted is left,
3 when some is (not repairable, or not applied yet), 1 when a repair failed.`,
		Example: `  hookledger drift stripe
  hookledger drift stripe --since 72h --json
  hookledger drift stripe --dry-run
  hookledger drift stripe --fix --yes`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.namespaceExplicit = cmd.Flags().Changed("namespace")
			return runDrift(cmd.Context(), t, cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.namespace, "namespace", "", "ledger namespace (default: the stripe source's)")
	fl.StringVar(&f.since, "since", "", "only objects created and rows written since: RFC 3339, Unix seconds or a duration ago (72h)")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON document")
	fl.BoolVar(&f.fix, "fix", false, "repair the drifted objects through the modules' handlers")
	fl.BoolVarP(&f.yes, "yes", "y", false, "with --fix: do not ask for confirmation (required without a terminal)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "show what --fix would claim, and change nothing")
	return cmd
}

// runDrift checks, prints the report, and repairs with --fix.
func runDrift(ctx context.Context, t terminal, stdout, stderr io.Writer, f driftFlags) error {
	switch {
	case f.fix && f.dryRun:
		return usageError("--fix and --dry-run do not go together: --dry-run shows what --fix would do")
	case f.yes && !f.fix:
		return usageError("--yes confirms --fix; without --fix nothing is changed")
	case f.namespaceExplicit && f.namespace == "":
		return usageError("--namespace needs a namespace")
	}
	since, err := parseWhen("since", f.since, time.Now())
	if err != nil {
		return err
	}
	env, err := openOps(ctx)
	if err != nil {
		return err
	}
	defer env.close()
	if env.cfg.StripeAPIKey == "" {
		return errors.New("STRIPE_API_KEY is not set: drift reads Stripe's subscriptions, payment intents, invoices and entitlements with it")
	}
	src := driftSource(env.cfg, f.namespace)
	api := provider.StripeAPI{Base: env.cfg.StripeAPIBase, Key: env.cfg.StripeAPIKey.Reveal(), HTTP: &http.Client{Timeout: 30 * time.Second}}
	progress, done := driftProgress(stderr)
	report, err := drift.Check(ctx, drift.Options{Namespace: src.Namespace, Since: since, Modules: stripeDrift(env.db, api), Progress: progress, Ledger: env.db})
	done()
	if err != nil {
		return err
	}
	out := driftOutput{Provider: "stripe", Report: report}
	if f.fix || f.dryRun {
		out.Repairs = report.Plan(drift.StripeEvent)
	}
	if !f.asJSON {
		printDrift(stdout, report)
		printRepairs(stdout, out.Repairs)
	}
	if f.fix {
		n := 0
		for _, o := range out.Repairs {
			if o.Result == drift.WouldRepair {
				n++
			}
		}
		if n > 0 {
			if err := confirmFix(t, n, f.yes); err != nil {
				return err
			}
			if out.Repairs, err = drift.Fix(ctx, out.Repairs, drift.FixOptions{Source: src, Ledger: env.store, Wait: fixWait}); err != nil {
				return err
			}
			if !f.asJSON {
				printRepairs(stdout, out.Repairs)
			}
		}
	}
	if f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
	return driftStatus(report, out.Repairs, f.fix)
}

// driftOutput is the --json document.
type driftOutput struct {
	Provider string `json:"provider"`
	*drift.Report
	Repairs []drift.Outcome `json:"repairs,omitempty"`
}

// driftStatus is the command's outcome: nil when no drift is left, errDrift
// (exit 3) when some is, an error (exit 1) when a repair failed.
func driftStatus(r *drift.Report, repairs []drift.Outcome, fixed bool) error {
	if len(r.Findings) == 0 {
		return nil
	}
	if !fixed {
		return fmt.Errorf("%w: %d object(s) drifted", errDrift, len(r.Findings))
	}
	var failed, left int
	for _, o := range repairs {
		switch {
		case o.Result == drift.Failed:
			failed++
		case o.Remains():
			left++
		}
	}
	switch {
	case failed > 0:
		return fmt.Errorf("%d repair(s) failed; River retries them (hookledger events list --status failed)", failed)
	case left > 0:
		return fmt.Errorf("%w: %d of %d drifted object(s) left", errDrift, left, len(r.Findings))
	}
	return nil
}

// driftSource is the source repairs are claimed through: the configured
// Stripe source of the namespace, else the stripe source's (its namespace
// by default).
func driftSource(cfg *config.Config, namespace string) *intake.Source {
	if namespace != "" {
		for _, s := range cfg.Sources {
			if s.Provider == "stripe" && s.Namespace == namespace {
				return intakeSource(cfg, s.Name, "stripe")
			}
		}
		return &intake.Source{Name: namespace, Namespace: namespace, Provider: provider.Stripe}
	}
	return intakeSource(cfg, "stripe", "stripe")
}

// confirmFix lets --fix go ahead, even for one repair: --yes, or a person
// on a terminal, says so; without a terminal it is refused.
func confirmFix(t terminal, n int, yes bool) error {
	return ask(t, yes, "--fix would", fmt.Sprintf("claim %d repair event(s), which the workers apply to business rows", n))
}

// driftNames are the categories as the table shows them.
var driftNames = map[drift.Category]string{
	drift.MissingHere: "missing here", drift.MissingAtProvider: "missing at stripe", drift.Differs: "differs", drift.Ahead: "ahead",
}

// printDrift writes the report as a summary and a table of the drifted
// objects, then the objects of erased subjects, apart.
func printDrift(w io.Writer, r *drift.Report) {
	var kinds []string
	total := 0
	for kind, c := range r.Checked {
		kinds = append(kinds, fmt.Sprintf("%s: %d at Stripe, %d stored, %d drifted", kind, c.Objects, c.Rows, c.Drifted))
		total += c.Drifted
	}
	slices.Sort(kinds)
	defer printErased(w, r.Erased)
	if total == 0 {
		fmt.Fprintf(w, "no drift in namespace %s (%s)\n", r.Namespace, strings.Join(kinds, "; "))
		return
	}
	fmt.Fprintf(w, "drift in namespace %s: %d object(s) (%s)\n\n", r.Namespace, total, strings.Join(kinds, "; "))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tID\tDRIFT\tROW VERSION\tSTRIPE AS OF\tSTORED -> STRIPE")
	for _, f := range r.Findings {
		version := "-"
		if f.RowAt != nil {
			version = fmt.Sprintf("%d (%s)", f.RowVersion, f.RowAt.Format(time.RFC3339))
		}
		name := driftNames[f.Drift]
		if f.Replayed {
			name += " (replayed)"
		}
		what := drift.Describe(f.Fields)
		if f.Drift == drift.Ahead {
			what = "dated after Stripe's answer"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Kind, f.ID, name, version, f.ObjectAt.UTC().Format(time.RFC3339), what)
	}
	_ = tw.Flush()
}

// printErased lists the objects of erased subjects: not drift, never
// repaired.
func printErased(w io.Writer, erased []drift.Finding) {
	if len(erased) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%d object(s) of erased subjects, not drift and not repaired:\n", len(erased))
	for _, f := range erased {
		fmt.Fprintf(w, "  %s/%s (%s)\n", f.Kind, f.ID, driftNames[f.Drift])
	}
}

// printRepairs writes one line per repair.
func printRepairs(w io.Writer, repairs []drift.Outcome) {
	if len(repairs) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, o := range repairs {
		line := fmt.Sprintf("%s %s/%s", strings.ReplaceAll(string(o.Result), "_", " "), o.Kind, o.ID)
		if o.EventID != "" {
			line += fmt.Sprintf(" with %s %s", o.EventType, o.EventID)
		}
		if o.Reason != "" {
			line += ": " + o.Reason
		}
		fmt.Fprintln(w, line)
	}
}

// driftProgress shows a live line on a terminal and nothing otherwise.
func driftProgress(w io.Writer) (func(string, drift.Counts), func()) {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return nil, func() {}
	}
	bar := progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetDescription("checking"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	return func(kind string, c drift.Counts) {
			bar.Describe(fmt.Sprintf("%s: %d at Stripe, %d stored, %d drifted", kind, c.Objects, c.Rows, c.Drifted))
			_ = bar.Add(1)
		}, func() {
			_ = bar.Finish()
		}
}
