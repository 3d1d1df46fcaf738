package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hookledger/hookledger/config"
)

// The ledger at scale (bench --ledger-rows N): the service measured again
// on a ledger seeded with N rows (seed.go), against the run's own
// measurement on an empty one, and every operator page timed on both.

// benchAdminToken is the bench service's ADMIN_TOKEN when it serves the
// operator pages.
const benchAdminToken = "hookledger-bench-admin-token"

// benchStandardSecret is the bench service's Standard Webhooks secret
// when it serves the operator pages, so that the seeded usage events come
// from a configured source.
const benchStandardSecret = "whsec_aG9va2xlZGdlciBiZW5jaCBzZWNyZXQ="

// scaleEnv is the environment of the services the scale run compares:
// both serve the console and the admin API.
var scaleEnv = []string{"ADMIN_TOKEN=" + benchAdminToken, "METRICS_TOKEN=" + benchAdminToken, "METRICS_ADDR=",
	"STANDARD_WEBHOOK_SECRET=" + benchStandardSecret}

// scaleTables are emptied before seeding, as they were before the
// service's first phase on the empty ledger.
var scaleTables = []string{"public.webhook_event", "public.subscription", "public.payment", "public.github_branch",
	"public.usage_total", "public.usage_delta", "public.delivery_stat"}

// pageFetches is how many times each operator page is fetched.
const pageFetches = 5

// slowPageMS is the median above which a page is called slow.
const slowPageMS = 300

// scaleReport is the ledger at scale, in Report.
type scaleReport struct {
	LedgerRows     int     `json:"ledger_rows"`
	SeedSeconds    float64 `json:"seed_seconds"`
	SeedRowsPerSec float64 `json:"seed_rows_per_sec"`
	// VacuumSeconds is VACUUM (ANALYZE) and CHECKPOINT after seeding: the
	// tables as autovacuum keeps them (the planner's statistics of the
	// delivery counts included), and no seeding writes left for the
	// measured phases to flush.
	VacuumSeconds float64  `json:"vacuum_analyze_seconds"`
	TableMB       float64  `json:"webhook_event_mb"`
	Empty         scaleRun `json:"empty"`
	Seeded        scaleRun `json:"seeded"`
	// EmptyAfter is the empty ledger measured again after the seeded one.
	EmptyAfter scaleRun `json:"empty_after"`
	// Ratios are seeded over the mean of empty and empty after.
	Ratios    scaleRatios `json:"ratios_seeded_to_empty"`
	SlowPages []string    `json:"slow_pages_seeded"`
}

// scaleRun is the service measured on one ledger.
type scaleRun struct {
	Ingest        float64      `json:"ingest_events_per_sec"`
	IngestCPU     cpuUse       `json:"ingest_cpu"`
	EndToEnd      float64      `json:"end_to_end_events_per_sec"`
	EndToEndCPU   cpuUse       `json:"end_to_end_cpu"`
	Peak          latency      `json:"peak_latency"`
	ApplyAlone    float64      `json:"apply_alone_events_per_sec"`
	ApplyAloneCPU cpuUse       `json:"apply_alone_cpu"`
	Pages         []pageTiming `json:"pages"`
}

// applyMS is the apply's CPU per event, the service's and its backends',
// in milliseconds.
func (r scaleRun) applyMS() float64 { return r.ApplyAloneCPU.Service + r.ApplyAloneCPU.Backends }

// endToEndMS is the CPU per event of ingest and apply together, the
// service's and its backends', in milliseconds.
func (r scaleRun) endToEndMS() float64 { return r.EndToEndCPU.Service + r.EndToEndCPU.Backends }

// overMean is x over the mean of before and after: a seeded figure over
// the empty ledger's, measured on each side of it.
func overMean(x, before, after float64) float64 { return x / ((before + after) / 2) }

type scaleRatios struct {
	Ingest      float64 `json:"ingest"`
	EndToEnd    float64 `json:"end_to_end"`
	EndToEndCPU float64 `json:"end_to_end_cpu_per_event"`
	ApplyCPU    float64 `json:"apply_cpu_per_event"`
}

// pageTiming is one operator page fetched pageFetches times.
type pageTiming struct {
	Name   string  `json:"page"`
	Path   string  `json:"path"`
	Median float64 `json:"median_ms"`
	Max    float64 `json:"max_ms"`
}

// operatorPages are the pages an operator reads, ev's own among them,
// with the list filters and searches: a source, a type, a type family, a
// type no row has, a time window a month back, an id, an id's prefix, an
// id without its namespace; and the failure groups, which read every
// failed event.
func operatorPages(ev benchDelivery) []pageTiming {
	key := url.Values{"namespace": {ev.Provider}, "id": {ev.ID}}.Encode()
	return []pageTiming{
		{Name: "console overview", Path: "/console/"},
		{Name: "console overview, 24 h", Path: "/console/?window=24h"},
		{Name: "console events", Path: "/console/events"},
		{Name: "console events, failed", Path: "/console/events?status=failed"},
		{Name: "console events, discarded", Path: "/console/events?status=discarded"},
		{Name: "console events, source", Path: "/console/events?source=github"},
		{Name: "console events, type", Path: "/console/events?type=invoice.paid"},
		{Name: "console events, type family", Path: "/console/events?type=invoice.*"},
		{Name: "console events, type none has", Path: "/console/events?type=no.such.type"},
		{Name: "console events, 30 days back", Path: "/console/events?until=720h"},
		{Name: "console search, id", Path: "/console/events?" + url.Values{"id": {ev.ID}}.Encode()},
		{Name: "console search, id prefix", Path: "/console/events?" + url.Values{"id": {ev.ID[:len(ev.ID)*2/3]}}.Encode()},
		{Name: "console event", Path: "/console/event?" + key},
		{Name: "console failed", Path: "/console/failed"},
		{Name: "admin stats", Path: "/admin/stats"},
		{Name: "admin events", Path: "/admin/events"},
		{Name: "admin events, failed", Path: "/admin/events?status=failed"},
		{Name: "admin events, type", Path: "/admin/events?type=charge.refunded&limit=500"},
		{Name: "admin events, type, 50", Path: "/admin/events?type=invoice.paid&limit=50"},
		{Name: "admin failure groups", Path: "/admin/failures"},
		{Name: "admin event", Path: "/admin/events/" + url.PathEscape(ev.ID) + "?namespace=" + url.QueryEscape(ev.Provider)},
		{Name: "admin event, no namespace", Path: "/admin/events/" + url.PathEscape(ev.ID)},
		{Name: "metrics", Path: "/metrics"},
	}
}

// fetchPages fetches every operator page pageFetches times, one request
// at a time, with the admin token, and times each.
func fetchPages(ctx context.Context, base string, ev benchDelivery) ([]pageTiming, error) {
	client := &http.Client{Timeout: 5 * time.Minute}
	pages := operatorPages(ev)
	for i := range pages {
		p := &pages[i]
		ms := make([]float64, 0, pageFetches)
		for range pageFetches {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+p.Path, nil)
			if err != nil {
				return nil, err
			}
			req.Header.Set("Authorization", "Bearer "+benchAdminToken)
			start := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				return nil, fmt.Errorf("GET %s: %w", p.Path, err)
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ms = append(ms, float64(time.Since(start))/float64(time.Millisecond))
			if err != nil {
				return nil, fmt.Errorf("GET %s: %w", p.Path, err)
			}
			if resp.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("GET %s: %s", p.Path, resp.Status)
			}
		}
		slices.Sort(ms)
		p.Median, p.Max = ms[len(ms)/2], ms[len(ms)-1]
		if len(ms)%2 == 0 {
			p.Median = (ms[len(ms)/2-1] + ms[len(ms)/2]) / 2
		}
	}
	return pages, nil
}

// lastEventID is the newest ledger row's id, 0 when there is none: the
// rows a phase claims come after it.
func lastEventID(ctx context.Context, m *meter) (int64, error) {
	var id int64
	err := m.db.QueryRow(ctx, `SELECT COALESCE(max(id), 0) FROM webhook_event`).Scan(&id)
	return id, err
}

// runScale seeds the ledger with o.LedgerRows rows and measures the
// service on it as Run did on the empty ledger: peak ingest, end to end,
// the operator pages, then ingest and apply alone.
func runScale(ctx context.Context, m *meter, dbURL string, gen *payloads, o Options, s *scaleReport, logf func(string, ...any)) error {
	if err := clearJobs(ctx, dbURL, scaleTables...); err != nil {
		return err
	}
	logf("bench: seeding the ledger with %d rows, %d per statement", o.LedgerRows, seedChunk)
	took, err := seedLedger(ctx, m.db, o.Testdata, o.LedgerRows, time.Now(), logf)
	if err != nil {
		return err
	}
	s.SeedSeconds, s.SeedRowsPerSec = took.Seconds(), float64(o.LedgerRows)/took.Seconds()
	logf("bench: VACUUM (ANALYZE) webhook_event and delivery_stat, and CHECKPOINT")
	start := time.Now()
	if _, err := m.db.Exec(ctx, `VACUUM (ANALYZE) webhook_event, delivery_stat`); err != nil {
		return fmt.Errorf("vacuum the seeded ledger: %w", err)
	}
	if _, err := m.db.Exec(ctx, `CHECKPOINT`); err != nil {
		logf("bench: no CHECKPOINT (%v): the seeding's writes may be flushed during the measurement", err)
	}
	s.VacuumSeconds = time.Since(start).Seconds()
	var size int64
	if err := m.db.QueryRow(ctx, `SELECT pg_total_relation_size('webhook_event')`).Scan(&size); err != nil {
		return err
	}
	s.TableMB = float64(size) / (1 << 20)

	if err := measureLedger(ctx, m, dbURL, gen, "seeded", o, &s.Seeded, logf); err != nil {
		return err
	}
	// The empty ledger again: the machine's speed drifts over the minutes
	// seeding takes, so the ratios take the mean of the empty ledger before
	// and after the seeded one, as the baselines bracket the service.
	if err := clearJobs(ctx, dbURL, scaleTables...); err != nil {
		return err
	}
	if err := measureLedger(ctx, m, dbURL, gen, "emptied", o, &s.EmptyAfter, logf); err != nil {
		return err
	}
	r, e, a := s.Seeded, s.Empty, s.EmptyAfter
	s.Ratios = scaleRatios{Ingest: overMean(r.Ingest, e.Ingest, a.Ingest), EndToEnd: overMean(r.EndToEnd, e.EndToEnd, a.EndToEnd),
		EndToEndCPU: overMean(r.endToEndMS(), e.endToEndMS(), a.endToEndMS()), ApplyCPU: overMean(r.applyMS(), e.applyMS(), a.applyMS())}
	s.SlowPages = []string{}
	for _, p := range r.Pages {
		if p.Median > slowPageMS {
			s.SlowPages = append(s.SlowPages, p.Name)
		}
	}
	return nil
}

// measureLedger measures the service on the ledger as it is, as Run did on
// the empty one: peak ingest, end to end, the operator pages (on a ledger
// that is not empty), then ingest and apply alone. label names the run's
// events, which no earlier run's share.
func measureLedger(ctx context.Context, m *meter, dbURL string, gen *payloads, label string, o Options, r *scaleRun, logf func(string, ...any)) error {
	after, err := lastEventID(ctx, m)
	if err != nil {
		return err
	}
	logf("bench: starting the service on the %s ledger", label)
	svc, err := startBenchService(dbURL, config.RoleAll, o.GroupCommit, o.Workers, o.Clients, scaleEnv...)
	if err != nil {
		return err
	}
	defer svc.stop()
	m.servicePID = svc.cmd.Process.Pid
	logf("bench: peak ingest on the %s ledger, %d events from %d clients", label, o.Events, o.Clients)
	peak := gen.with(label)
	snap := m.snapshot(ctx)
	start := time.Now()
	lat, errs := drive(ctx, svc.url, peak, o.Events, o.Clients, 0)
	r.Ingest = float64(o.Events) / time.Since(start).Seconds()
	r.IngestCPU = m.since(ctx, snap, o.Events)
	r.Peak = percentiles(lat)
	if errs > 0 {
		return fmt.Errorf("%d request(s) failed on the %s ledger", errs, label)
	}
	last, err := svc.waitSettled(ctx, o.Events, after)
	if err != nil {
		return err
	}
	r.EndToEnd = float64(o.Events) / last.Sub(start).Seconds()
	r.EndToEndCPU = m.since(ctx, snap, o.Events)
	if after > 0 {
		logf("bench: operator pages on the %s ledger", label)
		if r.Pages, err = fetchPages(ctx, svc.url, peak.event(1)); err != nil {
			return err
		}
	}
	svc.stop()
	m.servicePID = 0

	if err := clearJobs(ctx, dbURL, "public.subscription"); err != nil {
		return err
	}
	halves := Report{Events: o.Events, Clients: o.Clients}
	if err := benchHalves(ctx, m, dbURL, &halves, gen, o.GroupCommit, o.Workers, logf, scaleEnv...); err != nil {
		return err
	}
	if halves.Errors > 0 {
		return fmt.Errorf("%d request(s) failed on the %s ledger", halves.Errors, label)
	}
	r.ApplyAlone, r.ApplyAloneCPU = halves.ApplyAlone, halves.ApplyAloneCPU
	return nil
}

// printScale prints the ledger at scale beside the empty ledger.
func printScale(w io.Writer, s *scaleReport) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	seeded := fmt.Sprintf("%d rows", s.LedgerRows)
	p("ledger at scale: %d rows seeded in %.1f s (%.0f rows/s); VACUUM (ANALYZE) and CHECKPOINT %.1f s; webhook_event %.0f MB",
		s.LedgerRows, s.SeedSeconds, s.SeedRowsPerSec, s.VacuumSeconds, s.TableMB)
	p("%-40s %15s %15s %15s %13s", "", "empty ledger", seeded, "emptied again", "seeded/empty")
	e, r, a := s.Empty, s.Seeded, s.EmptyAfter
	p("%-40s %15.0f %15.0f %15.0f %12.2fx", "hookledger ingest, events/s", e.Ingest, r.Ingest, a.Ingest, s.Ratios.Ingest)
	p("%-40s %15.0f %15.0f %15.0f %12.2fx", "hookledger end-to-end, events/s", e.EndToEnd, r.EndToEnd, a.EndToEnd, s.Ratios.EndToEnd)
	p("%-40s %15s %15s %15s", "latency at peak p50 / p99, ms", fmt.Sprintf("%.1f / %.1f", e.Peak.P50, e.Peak.P99),
		fmt.Sprintf("%.1f / %.1f", r.Peak.P50, r.Peak.P99), fmt.Sprintf("%.1f / %.1f", a.Peak.P50, a.Peak.P99))
	p("%-40s %15.2f %15.2f %15.2f %12.2fx", "end-to-end CPU per event, ms", e.endToEndMS(), r.endToEndMS(), a.endToEndMS(), s.Ratios.EndToEndCPU)
	p("%-40s %15.0f %15.0f %15.0f %12.2fx", "apply alone, events/s", e.ApplyAlone, r.ApplyAlone, a.ApplyAlone,
		overMean(r.ApplyAlone, e.ApplyAlone, a.ApplyAlone))
	p("%-40s %15.2f %15.2f %15.2f %12.2fx", "apply CPU per event, ms", e.applyMS(), r.applyMS(), a.applyMS(), s.Ratios.ApplyCPU)
	p("(CPU: the service and its PostgreSQL backends; ratios: seeded over the mean of the two empty runs)")
	p("%-40s %15s %15s %13s", fmt.Sprintf("operator page, ms (median / max of %d)", pageFetches), "empty ledger", seeded, "seeded/empty")
	for i, pg := range r.Pages {
		var before pageTiming
		if i < len(e.Pages) {
			before = e.Pages[i]
		}
		mark := ""
		if pg.Median > slowPageMS {
			mark = "  slow"
		}
		p("%-40s %15s %15s %12.1fx%s", pg.Name, fmt.Sprintf("%.1f / %.1f", before.Median, before.Max),
			fmt.Sprintf("%.1f / %.1f", pg.Median, pg.Max), pg.Median/before.Median, mark)
	}
	if len(s.SlowPages) == 0 {
		p("no operator page over %d ms at %d rows", slowPageMS, s.LedgerRows)
	} else {
		p("pages over %d ms at %d rows: %s", slowPageMS, s.LedgerRows, strings.Join(s.SlowPages, ", "))
	}
}
