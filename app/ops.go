package app

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/spf13/cobra"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/operations/admin"
)

// opsEnv is what an operations command works with: the configuration,
// the ledger on an insert-only River client (no HTTP, no workers), and the
// modules' registrations.
type opsEnv struct {
	cfg   *config.Config
	db    *sql.DB
	store *ledger.Store
	// registry holds what every module registers, as the server's does:
	// erase runs the modules' EraseFuncs from it.
	registry *ledger.Registry
	// sealer opens and seals payloads (PAYLOAD_KEYS); nil when off.
	sealer *ledger.Sealer
	close  func()
}

// openOps connects for an operations command. Its Store claims as the
// server does without log-only (replay): a duplicate is never applied
// again from the command line. The modules register as they do in New
// (registerModules), so a registration that went wrong fails here too.
func openOps(ctx context.Context) (*opsEnv, error) {
	cfg, err := config.Load()
	if err != nil {
		return nil, fmt.Errorf("configuration:\n%w", err)
	}
	if err := cfg.RequireDatabase(); err != nil {
		return nil, err
	}
	log, err := NewLogger(&config.Config{LogLevel: "warn", LogFormat: "console"})
	if err != nil {
		return nil, err
	}
	pool, err := openPool(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDBFromPool(pool)
	closeAll := func() {
		db.Close()
		pool.Close()
	}
	modules := &App{cfg: cfg, log: log, db: db, metrics: metrics.New(), registry: ledger.NewRegistry()}
	modules.registerModules()
	jobs, err := ledger.NewRiver(db, nil, ledger.RiverOptions{Registry: modules.registry, Logger: log, Metrics: modules.metrics})
	if err != nil {
		closeAll()
		return nil, err
	}
	sealer, err := sealerOf(cfg)
	if err != nil {
		closeAll()
		return nil, err
	}
	return &opsEnv{cfg: cfg, db: db, store: ledger.NewStore(db, jobs, ledger.StoreOptions{Sealer: sealer}), registry: modules.registry,
		sealer: sealer, close: closeAll}, nil
}

// parseWhen reads a point in time: RFC 3339, Unix seconds, or a duration
// meaning that long ago ("2h").
func parseWhen(flag, v string, now time.Time) (time.Time, error) {
	t, err := config.ParseTime(v, now)
	if err != nil {
		return t, usageError("--%s %v", flag, err)
	}
	return t, nil
}

func eventsCommand(t terminal) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events list|show|requeue|discard",
		Short: "Inspect the ledger, and requeue or discard events",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRun,
	}
	cmd.AddCommand(eventsListCommand(), eventsShowCommand(), eventsRequeueCommand(t), eventsDiscardCommand())
	return cmd
}

// filterFlags are the ledger filters list and requeue share.
type filterFlags struct {
	status, source, typ, namespace, since, until string
}

func (f *filterFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.status, "status", "", "claimed, processing, settled, failed or discarded")
	fl.StringVar(&f.source, "source", "", "source name")
	fl.StringVar(&f.typ, "type", "", "event type; a trailing * matches a family (invoice.*)")
	fl.StringVar(&f.namespace, "namespace", "", "ledger namespace")
	fl.StringVar(&f.since, "since", "", "received at or after: RFC 3339, Unix seconds or a duration ago (2h)")
	fl.StringVar(&f.until, "until", "", "received before: RFC 3339, Unix seconds or a duration ago")
	_ = cmd.RegisterFlagCompletionFunc("status", cobra.FixedCompletions([]string{"claimed", "processing", "settled", "failed", "discarded"}, cobra.ShellCompDirectiveNoFileComp))
}

// selects reports whether any filter that narrows a bulk change is set.
func (f *filterFlags) selects() bool {
	return f.status != "" || f.source != "" || f.typ != "" || f.since != "" || f.until != ""
}

func (f *filterFlags) build() (ledger.Filter, error) {
	lf := ledger.Filter{Status: webhookevent.Status(f.status), Source: f.source, Type: f.typ, Namespace: f.namespace}
	if lf.Status != "" && !ledger.ValidStatus(lf.Status) {
		return lf, usageError("--status %q: want claimed, processing, settled, failed or discarded", lf.Status)
	}
	now := time.Now()
	var err error
	if lf.Since, err = parseWhen("since", f.since, now); err != nil {
		return lf, err
	}
	lf.Until, err = parseWhen("until", f.until, now)
	return lf, err
}

// lastErrorWidth is how much of the first line of last_error (or of a
// discard's reason) the table shows: room for the handler's name and its
// reason ("subscription.applyStripe: ..."), cut only past that.
const lastErrorWidth = 200

func eventsListCommand() *cobra.Command {
	var (
		filters filterFlags
		limit   int
		after   string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "list [--status S] [--source S] [--type T] [--since T] [--until T] [--limit N] [--after CURSOR] [--json]",
		Short: "List ledger rows, newest first",
		Long: `List ledger rows newest first, a page at a time. The table ends with the
--after value of the next page; --json prints {"events":[...],"next":"..."}
as the admin API does (next is "" on the last page).

STATUS says "settled (unhandled)" for an event that settled with no handler
matching its type. LAST ERROR is the first line of the last failure
("module.handler: reason"), or, for a discarded event, the reason it was
discarded.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := filters.build()
			if err != nil {
				return err
			}
			if limit < 1 || limit > 500 {
				return usageError("--limit %d: want 1 to 500", limit)
			}
			f.Limit = limit
			if after != "" {
				if f.After, err = strconv.ParseInt(after, 10, 64); err != nil || f.After <= 0 {
					return usageError("--after %q: pass the next value a previous page printed", after)
				}
			}
			env, err := openOps(cmd.Context())
			if err != nil {
				return err
			}
			defer env.close()
			rows, next, err := env.store.List(cmd.Context(), f)
			if err != nil {
				return err
			}
			return printEvents(cmd.OutOrStdout(), rows, next, asJSON)
		},
	}
	filters.register(cmd)
	cmd.Flags().IntVar(&limit, "limit", 50, "rows per page, at most 500")
	cmd.Flags().StringVar(&after, "after", "", "the next value of the previous page")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printEvents(w io.Writer, rows []*ent.WebhookEvent, next int64, asJSON bool) error {
	cursor := ""
	if next > 0 {
		cursor = strconv.FormatInt(next, 10)
	}
	if asJSON {
		events := make([]admin.EventJSON, len(rows))
		for i, r := range rows {
			events[i] = admin.EventOf(r, false)
		}
		return json.NewEncoder(w).Encode(map[string]any{"events": events, "next": cursor})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RECEIVED\tNAMESPACE\tEVENT ID\tTYPE\tSTATUS\tATTEMPTS\tLAST ERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.ReceivedAt.UTC().Format(time.RFC3339), r.Namespace, r.EventID,
			r.EventType, statusOf(r), r.Attempts, noteOf(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if cursor != "" {
		fmt.Fprintf(w, "more: --after %s\n", cursor)
	}
	return nil
}

// statusOf is a row's status as the table shows it: "settled (unhandled)"
// when no handler matched the event's type.
func statusOf(r *ent.WebhookEvent) string {
	if r.Status == webhookevent.StatusSettled && r.Handlers != nil && len(r.Handlers) == 0 {
		return "settled (unhandled)"
	}
	return string(r.Status)
}

// noteOf is the table's last column: a discarded row's reason, else the
// first line of its last error, cut at lastErrorWidth.
func noteOf(r *ent.WebhookEvent) string {
	var s string
	switch {
	case r.Status == webhookevent.StatusDiscarded && r.DiscardReason != nil:
		s = "reason: " + *r.DiscardReason
	case r.LastError != nil:
		s = *r.LastError
	}
	s, _, _ = strings.Cut(s, "\n")
	return shorten(strings.TrimSpace(s), lastErrorWidth)
}

// shorten cuts s to at most n runes, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func eventsShowCommand() *cobra.Command {
	var ns string
	cmd := &cobra.Command{
		Use:   "show EVENT_ID [--namespace NS]",
		Short: "Print one ledger row with its payload and its River job",
		Long: `Print one ledger row and its newest River apply job as JSON, the shape of
GET /admin/events/{event_id}: the event with its payload, the modules that
applied it (handlers: [] when none matched, null before its first apply),
its failure history (failures: attempt, job_id, at, handler, error), and
discard_reason when discarded; the job with its state, attempt,
max_attempts, scheduled_at (the next retry of a waiting job) and River's
errors.

A payload sealed with a key that PAYLOAD_KEYS does not hold (or with
PAYLOAD_KEYS unset) cannot be shown: the rest is printed, without the
payload, with payload_error saying why (also on stderr), and the exit code
is 0.`,
		Args: exactArgs(1, "one event id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := openOps(cmd.Context())
			if err != nil {
				return err
			}
			defer env.close()
			row, err := env.store.Find(cmd.Context(), ns, args[0])
			var sealed error
			if errors.Is(err, ledger.ErrPayloadKey) {
				// Everything but the payload needs no key.
				sealed = fmt.Errorf("%w: set PAYLOAD_KEYS to the key it was sealed with to show it", err)
				row, err = env.store.Locate(cmd.Context(), ns, args[0])
			}
			if err != nil {
				return err
			}
			job, err := env.store.FindJob(cmd.Context(), row.Namespace, row.EventID)
			if err != nil {
				return err
			}
			out := map[string]any{"event": admin.EventOf(row, true), "job": job}
			if sealed != nil {
				out["payload_error"] = sealed.Error()
				fmt.Fprintf(cmd.ErrOrStderr(), "hookledger: the payload is not shown: %v\n", sealed)
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		},
	}
	cmd.Flags().StringVar(&ns, "namespace", "", "ledger namespace, when the id is ambiguous")
	return cmd
}

func eventsRequeueCommand(t terminal) *cobra.Command {
	var (
		filters filterFlags
		force   bool
		all     bool
		bulk    bulkFlags
	)
	cmd := &cobra.Command{
		Use:   "requeue [--force] [--dry-run] (ID... | --status S | --type T | --since T | --until T | --all) [--yes]",
		Short: "Apply events again: the named ones, or those a filter selects",
		Long: `Set events back to claimed and make their apply job run now, in one
transaction each: River's existing job when it still has it, else a new one.

With ids, exactly the named events are requeued, whatever the order of ids
and flags. Every id is looked up first: an unknown id, or a settled event
without --force, changes nothing. Then each event is requeued in a
transaction of its own, with a line for each: "requeued", or "pending" when
it is being applied right now (that apply is left to finish; nothing is
changed). An event refused in between (settled or erased meanwhile) is
named on stderr and the exit code is 1; the others stay requeued.
Without ids, a filter (--status, --source, --type, --since,
--until) or --all selects them: failed events (or discarded ones with
--status discarded), or settled ones with --force.
A bulk requeue of more than one event shows the count and asks for
confirmation on a terminal; without a terminal it needs --yes.

Settled events are applied again only with --force, to re-run a fixed
handler.`,
		Example: `  hookledger events requeue evt_1Pgc6r
  hookledger events requeue --force evt_1Pgc6r evt_1Pgc7s
  hookledger events requeue --status failed --yes
  hookledger events requeue --force --type 'invoice.*' --since 24h --dry-run`,
		RunE: func(cmd *cobra.Command, ids []string) error {
			if len(ids) > 0 {
				if filters.selects() || all {
					return usageError("name event ids or select them with filters/--all, not both")
				}
				return requeueIDs(cmd.Context(), cmd.OutOrStdout(), filters.namespace, ids, force, bulk.dryRun)
			}
			if !filters.selects() && !all {
				return usageError("name the event ids to requeue, or select them with a filter (--status, --source, --type, --since, --until) or --all")
			}
			f, err := filters.build()
			if err != nil {
				return err
			}
			switch {
			case f.Status == "" && force:
				f.Status = webhookevent.StatusSettled
			case f.Status == "":
				f.Status = webhookevent.StatusFailed
			}
			if !admin.Requeueable(f.Status, force) {
				return usageError("requeue takes failed or discarded events, or settled ones with --force")
			}
			return requeueBulk(cmd.Context(), t, f, force, bulk)
		},
	}
	filters.register(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "apply settled events again")
	cmd.Flags().BoolVar(&all, "all", false, "without ids or filters: every failed event (with --force: every settled one)")
	bulk.register(cmd, "print what would be requeued, and change nothing")
	return cmd
}

// findAll looks every id up, and checks each row with check, before the
// caller changes any: a typo, or a row the command cannot take, changes
// nothing. It reads no payload: the rows it returns have none, and a
// sealed ledger needs no PAYLOAD_KEYS for it.
func findAll(ctx context.Context, store *ledger.Store, ns string, ids []string, check func(*ent.WebhookEvent) error) ([]*ent.WebhookEvent, error) {
	rows := make([]*ent.WebhookEvent, len(ids))
	for i, id := range ids {
		row, err := store.Locate(ctx, ns, id)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		if err := check(row); err != nil {
			return nil, fmt.Errorf("%s/%s: %w", row.Namespace, row.EventID, err)
		}
		rows[i] = row
	}
	return rows, nil
}

// requeueIDs requeues exactly the named events, each in a transaction of
// its own, printing what it did with each. Every id is looked up before
// any is changed, so a typo changes nothing; an event refused after that
// (settled or erased meanwhile) is reported, and the others stay requeued.
func requeueIDs(ctx context.Context, w io.Writer, ns string, ids []string, force, dryRun bool) error {
	env, err := openOps(ctx)
	if err != nil {
		return err
	}
	defer env.close()
	rows, err := findAll(ctx, env.store, ns, ids, func(r *ent.WebhookEvent) error {
		if r.Status == webhookevent.StatusSettled && !force {
			return ledger.ErrSettled
		}
		return nil
	})
	if err != nil {
		return err
	}
	var failed []error
	for _, r := range rows {
		if dryRun {
			fmt.Fprintf(w, "would requeue %s/%s (%s, %s)\n", r.Namespace, r.EventID, r.EventType, r.Status)
			continue
		}
		res, err := env.store.Requeue(ctx, r.Namespace, r.EventID, force)
		if err != nil {
			failed = append(failed, fmt.Errorf("%s/%s: %w", r.Namespace, r.EventID, err))
			continue
		}
		if res == ledger.RequeuePending {
			fmt.Fprintf(w, "%s/%s: pending (being applied right now: left to that apply, not requeued)\n", r.Namespace, r.EventID)
			continue
		}
		fmt.Fprintf(w, "%s/%s: %s\n", r.Namespace, r.EventID, res)
	}
	return errors.Join(failed...)
}

func eventsDiscardCommand() *cobra.Command {
	var ns, reason string
	cmd := &cobra.Command{
		Use:   "discard ID... --reason TEXT [--namespace NS]",
		Short: "Put away events that will not be applied, with the reason",
		Long: `Mark the named events discarded with the reason: they leave the backlog
and oldest-pending, their apply jobs that River would still run are
cancelled, and /admin/stats counts them as discarded. For an event that
will never apply (a poison payload, a customer that no longer exists).
Settled events cannot be discarded. "hookledger events requeue ID" brings a
discarded event back.

The named events are discarded all of them or none, in one transaction:
an unknown id, a settled event, or an event being applied right now
refuses the whole command (exit 1, the event and the reason on stderr) and
nothing is discarded; run it again when the apply has ended, or without
that id. On success it prints a line for each event.`,
		Example: `  hookledger events discard evt_1Pgc6r --reason "customer deleted in Stripe"
  hookledger events discard --namespace stripe evt_1 evt_2 --reason "test mode events"`,
		RunE: func(cmd *cobra.Command, ids []string) error {
			if len(ids) == 0 {
				return usageError("name the event ids to discard")
			}
			if strings.TrimSpace(reason) == "" {
				return usageError("--reason is required: say why the events will not be applied")
			}
			return discardIDs(cmd.Context(), cmd.OutOrStdout(), ns, ids, reason)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the events will not be applied (required)")
	cmd.Flags().StringVar(&ns, "namespace", "", "ledger namespace, when an id is ambiguous")
	return cmd
}

// discardIDs discards exactly the named events, all or none, printing a
// line for each. All or none, because the ids are one decision of the
// operator's (the test-mode events, a deleted customer's): a part done
// leaves the ledger in a state nobody asked for, to be sorted out by
// hand. Every id is looked up first, so a typo or a settled event among
// them is told before anything is locked; then DiscardMany discards them
// in one transaction, which an event settled or being applied meanwhile
// rolls back.
func discardIDs(ctx context.Context, w io.Writer, ns string, ids []string, reason string) error {
	env, err := openOps(ctx)
	if err != nil {
		return err
	}
	defer env.close()
	discarded, err := discardAll(ctx, env.store, ns, ids, reason)
	if err == nil {
		for _, row := range discarded {
			fmt.Fprintf(w, "%s/%s: discarded (%s)\n", row.Namespace, row.EventID, noteOf(row))
		}
		return nil
	}
	if errors.Is(err, ledger.ErrBeingApplied) {
		err = fmt.Errorf("%w; try again when it ends", err)
	}
	if len(ids) > 1 {
		return fmt.Errorf("%w; nothing was discarded", err)
	}
	return err
}

// discardAll looks the ids up and discards their events in one
// transaction.
func discardAll(ctx context.Context, store *ledger.Store, ns string, ids []string, reason string) ([]*ent.WebhookEvent, error) {
	rows, err := findAll(ctx, store, ns, ids, func(r *ent.WebhookEvent) error {
		if r.Status == webhookevent.StatusSettled {
			return ledger.ErrNotDiscardable
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	keys := make([]ledger.EventKey, len(rows))
	for i, r := range rows {
		keys[i] = ledger.EventKey{Namespace: r.Namespace, EventID: r.EventID}
	}
	return store.DiscardMany(ctx, keys, reason)
}

// requeueBulk counts what f selects, lists it with --dry-run, asks, and
// requeues.
func requeueBulk(ctx context.Context, t terminal, f ledger.Filter, force bool, bulk bulkFlags) error {
	env, err := openOps(ctx)
	if err != nil {
		return err
	}
	defer env.close()
	counted, err := env.store.RequeueMatching(ctx, f, force, true)
	if err != nil {
		return err
	}
	n := counted.Requeued
	if bulk.dryRun {
		if err := listMatching(ctx, t.out, env.store, f); err != nil {
			return err
		}
		fmt.Fprintf(t.out, "would requeue %d %s event(s)\n", n, f.Status)
		return nil
	}
	if n == 0 {
		fmt.Fprintf(t.out, "no %s event matches: nothing requeued\n", f.Status)
		return nil
	}
	if err := bulk.confirm(t, int64(n), fmt.Sprintf("requeue %d %s event(s)", n, f.Status)); err != nil {
		return err
	}
	done, err := env.store.RequeueMatching(ctx, f, force, false)
	if err != nil {
		return fmt.Errorf("after requeueing %d event(s): %w", done.Requeued, err)
	}
	fmt.Fprintf(t.out, "requeued %d %s event(s); %d already being applied; %d skipped\n", done.Requeued, f.Status, done.Pending, done.Skipped)
	for reason, k := range done.Reasons {
		fmt.Fprintf(t.out, "  %d skipped: %s\n", k, reason)
	}
	return nil
}

// listMatching prints every row f selects, oldest page last.
func listMatching(ctx context.Context, w io.Writer, store *ledger.Store, f ledger.Filter) error {
	f.After, f.Limit = 0, 500
	for {
		rows, next, err := store.List(ctx, f)
		if err != nil {
			return err
		}
		for _, r := range rows {
			fmt.Fprintf(w, "would requeue %s/%s (%s, %s)\n", r.Namespace, r.EventID, r.EventType, r.Status)
		}
		if next == 0 {
			return nil
		}
		f.After = next
	}
}

func pruneCommand(t terminal) *cobra.Command {
	var bulk bulkFlags
	cmd := &cobra.Command{
		Use:   "prune [--dry-run] [--yes]",
		Short: "Delete settled events older than RETENTION",
		Long: `Delete settled ledger rows received before now - RETENTION (default
2160h), in batches, keeping their dedup keys (without payload) so that a
redelivery stays a duplicate until KEY_RETENTION (default 9600h) expires
them. It shows the count first; deleting more than one row asks for
confirmation on a terminal, and needs --yes without one.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			env, err := openOps(ctx)
			if err != nil {
				return err
			}
			defer env.close()
			r, err := env.store.Prune(ctx, retentionOf(env.cfg), true)
			if err != nil {
				return err
			}
			oldest := "none"
			if !r.Oldest.IsZero() {
				oldest = r.Oldest.UTC().Format(time.RFC3339)
			}
			cutoff := r.Cutoff.UTC().Format(time.RFC3339)
			if bulk.dryRun {
				fmt.Fprintf(t.out, "would delete %d settled event(s) received before %s (RETENTION %s); oldest %s\n",
					r.Rows, cutoff, env.cfg.Retention, oldest)
				return nil
			}
			if err := bulk.confirm(t, r.Rows, fmt.Sprintf("delete %d settled event(s) received before %s", r.Rows, cutoff)); err != nil {
				return err
			}
			if r, err = env.store.Prune(ctx, retentionOf(env.cfg), false); err != nil {
				return err
			}
			fmt.Fprintf(t.out, "deleted %d settled event(s) received before %s; kept %d dedup key(s) of them (a redelivery stays a duplicate)\n",
				r.Rows, r.Cutoff.UTC().Format(time.RFC3339), r.KeptKeys)
			if r.ExpiredKeys > 0 {
				fmt.Fprintf(t.out, "expired %d dedup key(s) older than KEY_RETENTION %s\n", r.ExpiredKeys, env.cfg.KeyRetention)
			}
			return nil
		},
	}
	bulk.register(cmd, "count what would be deleted, and delete nothing")
	return cmd
}

// retentionOf is how long the ledger keeps its rows, and the keys of the
// pruned ones.
func retentionOf(cfg *config.Config) ledger.Retention {
	return ledger.Retention{Rows: cfg.Retention, Keys: cfg.KeyRetention}
}
