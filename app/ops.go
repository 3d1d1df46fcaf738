package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/admin"
	"github.com/hookledger/hookledger/modules/ledger"
	"github.com/hookledger/hookledger/modules/metrics"
)

// openOps connects for an operations command: the database, ent and an
// insert-only River client, no HTTP and no workers.
func openOps(ctx context.Context) (*App, error) {
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
	a := &App{cfg: cfg, role: config.RoleHTTP, log: log, metrics: metrics.New(), registry: ledger.NewRegistry()}
	if err := a.openDatabase(ctx); err != nil {
		a.Close()
		return nil, err
	}
	if a.river, err = ledger.NewRiver(a.db, nil, ledger.RiverOptions{Registry: a.registry, Logger: log, Metrics: a.metrics}); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// parseWhen reads a point in time: RFC 3339, Unix seconds, or a duration
// meaning that long ago ("2h").
func parseWhen(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Unix(n, 0), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%w: %q: want RFC 3339, Unix seconds or a duration such as 2h", errUsage, v)
}

func cmdEvents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: events list|show|requeue", errUsage)
	}
	switch args[0] {
	case "list":
		return eventsList(ctx, args[1:], stdout, stderr)
	case "show":
		return eventsShow(ctx, args[1:], stdout, stderr)
	case "requeue":
		return eventsRequeue(ctx, args[1:], stdout, stderr)
	}
	return fmt.Errorf("%w: events %s: want list, show or requeue", errUsage, args[0])
}

// filterFlags registers the shared filters and returns a function that
// builds the ledger filter after parsing.
func filterFlags(fs interface {
	String(name, value, usage string) *string
}) func() (ledger.Filter, error) {
	status := fs.String("status", "", "claimed, processing, settled or failed")
	source := fs.String("source", "", "source name")
	typ := fs.String("type", "", "event type; a trailing .* matches a family")
	ns := fs.String("namespace", "", "ledger namespace")
	since := fs.String("since", "", "received at or after: RFC 3339, Unix seconds or a duration ago (2h)")
	until := fs.String("until", "", "received before: RFC 3339, Unix seconds or a duration ago")
	return func() (ledger.Filter, error) {
		f := ledger.Filter{Status: *status, Source: *source, Type: *typ, Namespace: *ns}
		if f.Status != "" && !ledger.ValidStatus(f.Status) {
			return f, fmt.Errorf("%w: --status %q: want claimed, processing, settled or failed", errUsage, f.Status)
		}
		now := time.Now()
		var err error
		if f.Since, err = parseWhen(*since, now); err != nil {
			return f, err
		}
		f.Until, err = parseWhen(*until, now)
		return f, err
	}
}

func eventsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("events list", stderr)
	build := filterFlags(fs)
	limit := fs.Int("limit", 50, "rows, at most 500")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f, err := build()
	if err != nil {
		return err
	}
	if *limit < 1 || *limit > 500 {
		return fmt.Errorf("%w: --limit: want 1 to 500", errUsage)
	}
	f.Limit = *limit
	a, err := openOps(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	rows, _, err := ledger.List(ctx, a.ent, f)
	if err != nil {
		return err
	}
	if *asJSON {
		events := make([]admin.Event, len(rows))
		for i, r := range rows {
			events[i] = admin.EventOf(r, false)
		}
		return json.NewEncoder(stdout).Encode(map[string]any{"events": events})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RECEIVED\tNAMESPACE\tEVENT ID\tTYPE\tSTATUS\tATTEMPTS\tLAST ERROR")
	for _, r := range rows {
		lastErr := ""
		if r.LastError != nil {
			lastErr = strings.SplitN(*r.LastError, "\n", 2)[0]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.ReceivedAt.UTC().Format(time.RFC3339), r.Namespace, r.EventID,
			r.EventType, r.Status, r.Attempts, lastErr)
	}
	return tw.Flush()
}

func eventsShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("events show", stderr)
	ns := fs.String("namespace", "", "ledger namespace, when the id is ambiguous")
	id, rest := splitID(args)
	if err := parseFlags(fs, rest); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("%w: events show EVENT_ID [--namespace NS]", errUsage)
	}
	a, err := openOps(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	row, err := ledger.Find(ctx, a.ent, *ns, id)
	if err != nil {
		return err
	}
	job, err := ledger.FindJob(ctx, a.db, row.Namespace, row.EventID)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"event": admin.EventOf(row, true), "job": job})
}

// eventsRequeue requeues one event by id, every failed event, or (with
// --force) settled events in a window, to re-run a fixed handler.
func eventsRequeue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("events requeue", stderr)
	build := filterFlags(fs)
	force := fs.Bool("force", false, "apply settled events again")
	dryRun := fs.Bool("dry-run", false, "count what would be requeued")
	id, rest := splitID(args)
	if err := parseFlags(fs, rest); err != nil {
		return err
	}
	f, err := build()
	if err != nil {
		return err
	}
	a, err := openOps(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	if id != "" {
		row, err := ledger.Find(ctx, a.ent, f.Namespace, id)
		if err != nil {
			return err
		}
		if *dryRun {
			fmt.Fprintf(stdout, "would requeue %s/%s (%s)\n", row.Namespace, row.EventID, row.Status)
			return nil
		}
		res, err := ledger.Requeue(ctx, a.db, a.river, row.Namespace, row.EventID, *force)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s/%s: %s\n", row.Namespace, row.EventID, res)
		return nil
	}
	switch {
	case f.Status == "" && *force:
		f.Status = "settled"
	case f.Status == "":
		f.Status = "failed"
	}
	if f.Status != "failed" && !(f.Status == "settled" && *force) {
		return fmt.Errorf("%w: requeue takes failed events, or settled ones with --force", errUsage)
	}
	counts, err := ledger.RequeueMatching(ctx, a.db, a.river, f, *force, *dryRun)
	if err != nil {
		return err
	}
	if *dryRun {
		fmt.Fprintf(stdout, "would requeue %d %s event(s)\n", counts.Requeued, f.Status)
		return nil
	}
	fmt.Fprintf(stdout, "requeued %d %s event(s); %d already being applied; %d skipped\n", counts.Requeued, f.Status, counts.Pending, counts.Skipped)
	for reason, n := range counts.Reasons {
		fmt.Fprintf(stdout, "  %d skipped: %s\n", n, reason)
	}
	return nil
}

// splitID takes a leading positional event id off args.
func splitID(args []string) (string, []string) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0], args[1:]
	}
	return "", args
}

func cmdPrune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("prune", stderr)
	dryRun := fs.Bool("dry-run", false, "count what would be deleted")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	a, err := openOps(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	r, err := ledger.Prune(ctx, a.db, a.cfg.Retention, *dryRun)
	if err != nil {
		return err
	}
	if *dryRun {
		oldest := "none"
		if !r.Oldest.IsZero() {
			oldest = r.Oldest.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(stdout, "would delete %d settled event(s) received before %s (RETENTION %s); oldest %s\n",
			r.Rows, r.Cutoff.UTC().Format(time.RFC3339), a.cfg.Retention, oldest)
		return nil
	}
	fmt.Fprintf(stdout, "deleted %d settled event(s) received before %s\n", r.Rows, r.Cutoff.UTC().Format(time.RFC3339))
	return nil
}
