package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/migrations"
	"github.com/hookledger/hookledger/modules/testsupport/devdb"
)

// Report is what `hookledger-dev bench` measured, in one run.
type Report struct {
	Events   int    `json:"events"`
	Clients  int    `json:"clients"`
	Payloads string `json:"payloads"`
	// The database-only baselines.
	PlainSQL  sqlRun `json:"plain_sql_one_tx"`
	Reference sqlRun `json:"reference_design"`
	// The same two again right after the service's peak and half-rate
	// phases: the shared machine's speed drifts within a run, and the
	// ratios take the mean of the two measurements that bracket the
	// service's.
	PlainSQLAfter  sqlRun `json:"plain_sql_one_tx_after"`
	ReferenceAfter sqlRun `json:"reference_design_after"`
	// PlainHTTP is plain SQL behind HTTP: the plain one-transaction claim
	// in a bare net/http receiver that verifies and parses as hookledger
	// does (floor.go), before and after the service. The baselines above
	// do no HTTP, no verification and no parsing; a receiver of their
	// design must.
	PlainHTTP      sqlRun `json:"plain_sql_behind_http"`
	PlainHTTPAfter sqlRun `json:"plain_sql_behind_http_after"`
	Batched        sqlRun `json:"batched_ceiling"`
	// The floors (floor.go): the apply's database work in plain SQL, and
	// HTTP with nothing behind it.
	ApplyFloor sqlRun `json:"apply_floor"`
	HTTPFloor  sqlRun `json:"http_floor"`
	Floor      floor  `json:"floor"`
	// The service.
	Ingest      float64 `json:"ingest_events_per_sec"`
	IngestCPU   cpuUse  `json:"ingest_cpu"`
	Peak        latency `json:"peak_latency"`
	EndToEnd    float64 `json:"end_to_end_events_per_sec"`
	EndToEndCPU cpuUse  `json:"end_to_end_cpu"`
	HalfRate    float64 `json:"half_rate_events_per_sec"`
	Half        latency `json:"half_rate_latency"`
	PeakRSSMB   float64 `json:"peak_rss_mb"`
	// PeakApplyTx is the number of apply transactions that settled the
	// peak's events.
	PeakApplyTx int `json:"peak_apply_transactions"`
	// PeakClaimTx is the number of claim transactions that inserted events
	// at the peak: each inserts one apply job.
	PeakClaimTx int `json:"peak_claim_transactions"`
	// The two halves alone: ingest with no apply workers running, then the
	// apply workers draining that backlog with no ingest.
	IngestAlone    float64 `json:"ingest_alone_events_per_sec"`
	IngestAloneCPU cpuUse  `json:"ingest_alone_cpu"`
	ApplyAlone     float64 `json:"apply_alone_events_per_sec"`
	ApplyAloneCPU  cpuUse  `json:"apply_alone_cpu"`
	Errors         int64   `json:"errors"`
	Ratios         ratios  `json:"ratios"`
	PayloadColumn  string  `json:"payload_column"`
	// Scale is the service on a seeded ledger beside the empty one
	// (--ledger-rows); nil without it.
	Scale *scaleReport `json:"ledger_at_scale,omitempty"`
	// RefService is the reference design as a whole service, receiver
	// and workers (reference.go), measured as the service's peak is; nil
	// with --mix (it takes Stripe only).
	RefService *refServiceReport `json:"reference_service,omitempty"`
	// Prune, KeptKeys and Sealed are the optional phases (phases.go).
	Prune    *pruneReport    `json:"prune_under_ingest,omitempty"`
	KeptKeys *keptKeysReport `json:"kept_keys,omitempty"`
	Sealed   *sealedReport   `json:"sealed_payloads,omitempty"`
}

type ratios struct {
	IngestToPlain     float64 `json:"ingest_to_plain_sql"`
	IngestToReference float64 `json:"ingest_to_reference"`
	IngestToPlainHTTP float64 `json:"ingest_to_plain_sql_behind_http"`
	IngestToBatched   float64 `json:"ingest_to_batched_ceiling"`
	EndToEndToIngest  float64 `json:"end_to_end_to_ingest"`
	EndToEndToRef     float64 `json:"end_to_end_to_reference"`
	PlainToReference  float64 `json:"plain_sql_to_reference"`
	ApplyToFloor      float64 `json:"apply_alone_to_apply_floor"`
	// Left are the same ratios with each phase's rate divided by the
	// share of the machine that was left to it (cpuUse.left): what the
	// ratios would be had steal and other processes taken as much from
	// every phase. They are a check on the raw ratios, not a replacement.
	Left leftRatios `json:"ratios_for_the_machine_left"`
}

type leftRatios struct {
	IngestToPlain     float64 `json:"ingest_to_plain_sql"`
	IngestToReference float64 `json:"ingest_to_reference"`
	IngestToPlainHTTP float64 `json:"ingest_to_plain_sql_behind_http"`
	EndToEndToRef     float64 `json:"end_to_end_to_reference"`
}

// Secret is the webhook secret of the services the bench drives.
const Secret = benchSecret

const benchSecret = "whsec_hookledger_bench"

// Options is one benchmark run.
type Options struct {
	// Events per phase, at most PhaseEvents; Clients concurrent keep-alive
	// clients (and baseline connections).
	Events, Clients int
	// Workers is the service's apply workers; GroupCommit runs it with
	// group commit.
	Workers     int
	GroupCommit bool
	// Batch rows per statement from BatchClients connections: the batched
	// ceiling.
	Batch, BatchClients int
	// Mix sends a mix of providers' real payloads; Storage measures only
	// the payload storage layouts.
	Mix, Storage bool
	// Testdata is the folder of the real provider payloads.
	Testdata string
	// LedgerRows, when positive, measures the service again on a ledger
	// seeded with that many rows, and the operator pages on both.
	LedgerRows int
	// PruneRows, when positive, measures ingest with and without prune
	// deleting that many rows older than RETENTION.
	PruneRows int
	// KeptKeys, when positive, measures ingest with webhook_key empty and
	// holding that many keys.
	KeptKeys int
	// Sealed measures the service again with PAYLOAD_KEYS set.
	Sealed bool
}

// applyTxSQL counts the apply transactions so far: River's runs of the
// apply jobs. A job that an apply absorbed was never fetched by River,
// which names the client that attempts a job in attempted_by. A job run
// twice (a retry, a split) counts once: the count is exact in a run
// without failures, as the bench's are.
const applyTxSQL = `SELECT count(*) FROM river_job
	WHERE kind IN ('apply_batch', 'apply_event') AND state = 'completed' AND attempted_by IS NOT NULL`

// claimTxSQL counts the claim transactions so far that inserted events:
// each inserts one apply job. Exact in a run without failures (no split,
// requeue or retry inserts a job of its own).
const claimTxSQL = `SELECT count(*) FROM river_job WHERE kind IN ('apply_batch', 'apply_event')`

// Run measures the service on real provider payloads against the
// strongest plain versions of the alternative, all in one run: a
// one-transaction claim in plain SQL on hookledger's schema, the reference
// design, and the batched ceiling of the database.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	templates := []benchTemplate{subscriptionUpdated}
	if o.Mix {
		templates = benchMix
	}
	gen, err := loadPayloads(o.Testdata, "bench", templates)
	if err != nil {
		return err
	}
	cfg, err := config.LoadDev()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	admin, err := devdb.Server(ctx, cfg.DatabaseURL.Reveal(), logf)
	if err != nil {
		return err
	}
	url, _, drop, err := benchDatabase(ctx, admin, "bench")
	if err != nil {
		return err
	}
	defer drop()
	mcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	mcfg.MaxConns = 2
	mdb, err := pgxpool.NewWithConfig(ctx, mcfg)
	if err != nil {
		return err
	}
	defer mdb.Close()
	m := &meter{db: mdb}
	logf("bench: payloads %s; %d events per phase, %d clients", gen.sizes(), o.Events, o.Clients)
	if o.Storage {
		return benchStorage(ctx, m, url, o.Events, o.Clients, o.Batch, o.BatchClients, gen, stdout, logf)
	}

	r := Report{Events: o.Events, Clients: o.Clients, Payloads: gen.sizes()}
	if err := mdb.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod) || ', ' ||
			CASE attcompression WHEN 'l' THEN 'lz4' WHEN 'p' THEN 'pglz' ELSE current_setting('default_toast_compression') END
		FROM pg_attribute WHERE attrelid = 'webhook_event'::regclass AND attname = 'payload'`).Scan(&r.PayloadColumn); err != nil {
		return err
	}
	body := payloadArg(r.PayloadColumn[:5] == "bytea")
	logf("bench: plain SQL, one transaction per event, on hookledger's schema (payload %s)", r.PayloadColumn)
	if r.PlainSQL, err = sqlRate(ctx, m, url, o.Events, o.Clients, oneTxSQL("public.webhook_event"), body, gen.with("plain")); err != nil {
		return fmt.Errorf("plain SQL baseline: %w", err)
	}
	logf("bench: the reference design, one transaction per event")
	if err := setupReference(ctx, url); err != nil {
		return err
	}
	refBody := payloadArg(false) // jsonb, sent as text
	if r.Reference, err = sqlRate(ctx, m, url, o.Events, o.Clients, referenceSQL, refBody, gen.with("ref")); err != nil {
		return fmt.Errorf("reference design: %w", err)
	}
	logf("bench: batched ceiling, the ledger's claim statement, %d rows per statement from %d connections", o.Batch, o.BatchClients)
	batchGen := gen.with("batch")
	if r.Batched, err = batchRate(ctx, m, url, o.Events, o.BatchClients, o.Batch, ceilingBatch, batchGen); err != nil {
		return fmt.Errorf("batched ceiling: %w", err)
	}
	logf("bench: apply floor, plain SQL settling what the ceiling claimed, %d events per transaction from %d connections", applyFloorBatch, o.BatchClients)
	if r.ApplyFloor, err = applyFloor(ctx, m, url, batchGen, o.Events, o.BatchClients); err != nil {
		return fmt.Errorf("apply floor: %w", err)
	}
	if err := clearJobs(ctx, url, "public.webhook_event", "reference.webhook_event", "public.subscription"); err != nil {
		return err
	}
	logf("bench: HTTP floor, the load generator against a server that only reads each body and answers 200")
	if r.HTTPFloor, err = httpFloor(ctx, m, gen.with("http"), o.Events, o.Clients); err != nil {
		return fmt.Errorf("HTTP floor: %w", err)
	}
	logf("bench: plain SQL behind HTTP, one transaction per event in a bare net/http receiver that verifies and parses")
	if r.PlainHTTP, err = plainBehindHTTP(ctx, m, url, oneTxSQL("public.webhook_event"), body, gen.with("plain-http"), o.Events, o.Clients); err != nil {
		return fmt.Errorf("plain SQL behind HTTP: %w", err)
	}
	if err := clearJobs(ctx, url, "public.webhook_event"); err != nil {
		return err
	}

	if !o.Mix {
		logf("bench: the reference design as a service, %d events from %d clients, %d workers", o.Events, o.Clients, o.Workers)
		if err := setupReferenceService(ctx, url); err != nil {
			return err
		}
		ref, err := runReferenceService(ctx, m, url, gen.with("refsvc"), o.Events, o.Clients, o.Workers)
		if err != nil {
			return fmt.Errorf("reference service: %w", err)
		}
		r.RefService = &refServiceReport{Reference: ref}
	}

	// With --ledger-rows every service serves the operator pages, on the
	// empty ledger as on the seeded one.
	var env []string
	if o.LedgerRows > 0 {
		r.Scale, env = &scaleReport{LedgerRows: o.LedgerRows}, scaleEnv
	}
	logf("bench: starting the service (group commit %t, %d workers)", o.GroupCommit, o.Workers)
	svc, err := startBenchService(url, config.RoleAll, o.GroupCommit, o.Workers, o.Clients, env...)
	if err != nil {
		return err
	}
	defer svc.stop()
	m.servicePID = svc.cmd.Process.Pid

	logf("bench: peak ingest, %d events from %d clients", o.Events, o.Clients)
	peak := gen.with("peak")
	snap := m.snapshot(ctx)
	start := time.Now()
	lat, errs := drive(ctx, svc.url, peak, o.Events, o.Clients, 0)
	r.Ingest = float64(o.Events) / time.Since(start).Seconds()
	r.IngestCPU = m.since(ctx, snap, o.Events)
	r.Errors += errs
	r.Peak = percentiles(lat)
	last, err := svc.waitSettled(ctx, o.Events, 0)
	if err != nil {
		return err
	}
	r.EndToEnd = float64(o.Events) / last.Sub(start).Seconds()
	r.EndToEndCPU = m.since(ctx, snap, o.Events)
	if err := mdb.QueryRow(ctx, applyTxSQL).Scan(&r.PeakApplyTx); err != nil {
		return err
	}
	if err := mdb.QueryRow(ctx, claimTxSQL).Scan(&r.PeakClaimTx); err != nil {
		return err
	}
	logf("bench: %d claim transactions claimed the peak's %d events, %d apply transactions settled them",
		r.PeakClaimTx, o.Events, r.PeakApplyTx)
	if r.Scale != nil {
		logf("bench: operator pages on the empty ledger")
		if r.Scale.Empty.Pages, err = fetchPages(ctx, svc.url, peak.event(1)); err != nil {
			return err
		}
	}

	r.HalfRate = r.Ingest / 2
	logf("bench: latency at half the peak rate (%.0f events/s)", r.HalfRate)
	lat, errs = drive(ctx, svc.url, gen.with("half"), o.Events/2, o.Clients, r.HalfRate)
	r.Errors += errs
	r.Half = percentiles(lat)
	r.PeakRSSMB = peakRSSMB(svc.cmd.Process.Pid)
	svc.stop()
	m.servicePID = 0
	logf("bench: plain SQL, the reference design and plain SQL behind HTTP again, after the service")
	if r.PlainSQLAfter, err = sqlRate(ctx, m, url, o.Events, o.Clients, oneTxSQL("public.webhook_event"), body, gen.with("plain-after")); err != nil {
		return fmt.Errorf("plain SQL baseline, after: %w", err)
	}
	if r.ReferenceAfter, err = sqlRate(ctx, m, url, o.Events, o.Clients, referenceSQL, refBody, gen.with("ref-after")); err != nil {
		return fmt.Errorf("reference design, after: %w", err)
	}
	if r.PlainHTTPAfter, err = plainBehindHTTP(ctx, m, url, oneTxSQL("public.webhook_event"), body, gen.with("plain-http-after"), o.Events, o.Clients); err != nil {
		return fmt.Errorf("plain SQL behind HTTP, after: %w", err)
	}
	if err := clearJobs(ctx, url, "public.webhook_event", "public.subscription"); err != nil {
		return err
	}
	if err := benchHalves(ctx, m, url, &r, gen, o.GroupCommit, o.Workers, logf, env...); err != nil {
		return err
	}
	if r.Scale != nil {
		s := r.Scale
		s.Empty.Ingest, s.Empty.IngestCPU, s.Empty.EndToEnd, s.Empty.EndToEndCPU = r.Ingest, r.IngestCPU, r.EndToEnd, r.EndToEndCPU
		s.Empty.Peak, s.Empty.ApplyAlone, s.Empty.ApplyAloneCPU = r.Peak, r.ApplyAlone, r.ApplyAloneCPU
		if err := runScale(ctx, m, url, gen, o, s, logf); err != nil {
			return fmt.Errorf("ledger at scale: %w", err)
		}
	}
	plain, ref := (r.PlainSQL.Rate+r.PlainSQLAfter.Rate)/2, (r.Reference.Rate+r.ReferenceAfter.Rate)/2
	plainHTTP := (r.PlainHTTP.Rate + r.PlainHTTPAfter.Rate) / 2
	r.Ratios = ratios{
		IngestToPlain: r.Ingest / plain, IngestToReference: r.Ingest / ref, IngestToPlainHTTP: r.Ingest / plainHTTP,
		IngestToBatched: r.Ingest / r.Batched.Rate, EndToEndToIngest: r.EndToEnd / r.Ingest,
		EndToEndToRef: r.EndToEnd / ref, PlainToReference: plain / ref,
		ApplyToFloor: r.ApplyAlone / r.ApplyFloor.Rate,
	}
	left := func(rate float64, c cpuUse) float64 { return rate / c.left() }
	mean := func(a, b sqlRun) float64 { return (left(a.Rate, a.CPU) + left(b.Rate, b.CPU)) / 2 }
	ingest, refLeft := left(r.Ingest, r.IngestCPU), mean(r.Reference, r.ReferenceAfter)
	r.Ratios.Left = leftRatios{
		IngestToPlain:     ingest / mean(r.PlainSQL, r.PlainSQLAfter),
		IngestToReference: ingest / refLeft,
		IngestToPlainHTTP: ingest / mean(r.PlainHTTP, r.PlainHTTPAfter),
		EndToEndToRef:     left(r.EndToEnd, r.EndToEndCPU) / refLeft,
	}
	r.Floor = newFloor(&r)
	if rs := r.RefService; rs != nil {
		rs.Hookledger = serviceRun{Ingest: r.Ingest, IngestCPU: r.IngestCPU, EndToEnd: r.EndToEnd, EndToEndCPU: r.EndToEndCPU, Peak: r.Peak}
		rs.ratios()
	}
	if err := runPhases(ctx, m, url, gen, o, &r, logf); err != nil {
		return err
	}
	printBench(stdout, &r)
	if r.Errors > 0 {
		return fmt.Errorf("%d request(s) failed", r.Errors)
	}
	return nil
}

func printBench(w io.Writer, r *Report) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	cpu := func(c cpuUse) string {
		return fmt.Sprintf("service %.2f  pg backends %.2f  pg server %.2f  load %.2f  (steal %2.0f%%, other %2.0f%%)",
			c.Service, c.Backends, c.Server, c.Load, 100*c.Steal, 100*c.Other)
	}
	p("payloads: %s; payload column %s; %d events, %d clients", r.Payloads, r.PayloadColumn, r.Events, r.Clients)
	p("%-34s %8s   %s", "", "events/s", "CPU s per 1,000 events  (the machine's CPU taken by steal and by other processes)")
	p("%-34s %8.0f   %s", "plain SQL one-tx, own schema", r.PlainSQL.Rate, cpu(r.PlainSQL.CPU))
	p("%-34s %8.0f   %s", "reference design one-tx", r.Reference.Rate, cpu(r.Reference.CPU))
	p("%-34s %8.0f   %s", "plain SQL, after the service", r.PlainSQLAfter.Rate, cpu(r.PlainSQLAfter.CPU))
	p("%-34s %8.0f   %s", "reference design, after", r.ReferenceAfter.Rate, cpu(r.ReferenceAfter.CPU))
	p("%-34s %8.0f   %s", "plain SQL behind HTTP", r.PlainHTTP.Rate, cpu(r.PlainHTTP.CPU))
	p("%-34s %8.0f   %s", "plain SQL behind HTTP, after", r.PlainHTTPAfter.Rate, cpu(r.PlainHTTPAfter.CPU))
	p("%-34s %8.0f   %s", "batched ceiling", r.Batched.Rate, cpu(r.Batched.CPU))
	p("%-34s %8.0f   %s", "apply floor, plain SQL", r.ApplyFloor.Rate, cpu(r.ApplyFloor.CPU))
	p("%-34s %8.0f   %s", "HTTP floor (load + bare server)", r.HTTPFloor.Rate, cpu(r.HTTPFloor.CPU))
	p("%-34s %8.0f   %s", "hookledger ingest", r.Ingest, cpu(r.IngestCPU))
	p("%-34s %8.0f   %s", "hookledger end-to-end (settled)", r.EndToEnd, cpu(r.EndToEndCPU))
	p("latency at peak                    p50 %.1f ms  p95 %.1f ms  p99 %.1f ms", r.Peak.P50, r.Peak.P95, r.Peak.P99)
	p("latency at half rate (%.0f/s)       p50 %.1f ms  p95 %.1f ms  p99 %.1f ms", r.HalfRate, r.Half.P50, r.Half.P95, r.Half.P99)
	p("%-34s %8.0f   %s", "ingest alone (no apply workers)", r.IngestAlone, cpu(r.IngestAloneCPU))
	p("%-34s %8.0f   %s", "apply alone (draining it)", r.ApplyAlone, cpu(r.ApplyAloneCPU))
	p("service peak RSS                   %.1f MB", r.PeakRSSMB)
	x := r.Ratios
	p("ratios (plain SQL and the reference design: the mean of the runs before and after the service):")
	p("ratios: ingest/plain %.2fx  ingest/reference %.2fx  ingest/batched %.2fx  end-to-end/ingest %.2fx  end-to-end/reference %.2fx  plain/reference %.2fx  ingest/plain behind HTTP %.2fx",
		x.IngestToPlain, x.IngestToReference, x.IngestToBatched, x.EndToEndToIngest, x.EndToEndToRef, x.PlainToReference, x.IngestToPlainHTTP)
	p("ratios, each rate over the share of the machine steal and other processes left it: ingest/plain %.2fx  ingest/reference %.2fx  end-to-end/reference %.2fx  ingest/plain behind HTTP %.2fx",
		x.Left.IngestToPlain, x.Left.IngestToReference, x.Left.EndToEndToRef, x.Left.IngestToPlainHTTP)
	f := r.Floor
	p("floor: %.2f ms CPU per event (HTTP %.2f + claim %.2f + apply %.2f); at best ingest/plain %.2fx, ingest/reference %.2fx; the service's end-to-end CPU is %.2fx the floor; apply alone/apply floor %.2fx",
		f.Total, f.HTTP, f.Claim, f.Apply, f.BestToPlain, f.BestToReference, f.Service, x.ApplyToFloor)
	if r.RefService != nil {
		printRefService(w, r.RefService)
	}
	if r.Scale != nil {
		printScale(w, r.Scale)
	}
	printPhases(w, r)
	line, _ := json.Marshal(r)
	p("%s", line)
}

// benchHalves measures ingest with no apply workers (serve --role=http),
// then apply alone (serve --role=worker) draining what it claimed; both
// services run with env added.
func benchHalves(ctx context.Context, m *meter, url string, r *Report, gen *payloads, groupCommit bool, workers int, logf func(string, ...any), env ...string) error {
	after, err := lastEventID(ctx, m)
	if err != nil {
		return err
	}
	logf("bench: ingest alone, %d events, no apply workers", r.Events)
	svc, err := startBenchService(url, config.RoleHTTP, groupCommit, workers, r.Clients, env...)
	if err != nil {
		return err
	}
	m.servicePID = svc.cmd.Process.Pid
	snap := m.snapshot(ctx)
	start := time.Now()
	_, errs := drive(ctx, svc.url, gen.with("alone"), r.Events, r.Clients, 0)
	r.IngestAlone = float64(r.Events) / time.Since(start).Seconds()
	r.IngestAloneCPU = m.since(ctx, snap, r.Events)
	r.Errors += errs
	svc.stop()

	logf("bench: apply alone, draining %d events", r.Events)
	if svc, err = startBenchService(url, config.RoleWorker, groupCommit, workers, r.Clients, env...); err != nil {
		return err
	}
	defer svc.stop()
	m.servicePID = svc.cmd.Process.Pid
	snap = m.snapshot(ctx)
	start = time.Now()
	last, err := svc.waitSettled(ctx, r.Events, after)
	if err != nil {
		return err
	}
	r.ApplyAlone = float64(r.Events) / last.Sub(start).Seconds()
	r.ApplyAloneCPU = m.since(ctx, snap, r.Events)
	return nil
}

// benchStorage measures each payload layout: the one-transaction and the
// batched claim on a copy of the ledger table, and the bytes a row takes.
func benchStorage(ctx context.Context, m *meter, url string, events, clients, batch, batchClients int, gen *payloads, stdout io.Writer, logf func(string, ...any)) error {
	fmt.Fprintf(stdout, "%-36s %10s %10s %22s %22s %10s\n", "payload layout", "one-tx/s", "batched/s", "one-tx pg s/1k", "batched pg s/1k", "bytes/row")
	for k, l := range layouts {
		table, err := setupLayout(ctx, url, fmt.Sprintf("layout_%d", k), l)
		if err != nil {
			return err
		}
		logf("bench: payload %s", l.Name)
		g := gen.with(fmt.Sprintf("l%d", k))
		one, err := sqlRate(ctx, m, url, events, clients, oneTxSQL(table), payloadArg(l.Bytea), g)
		if err != nil {
			return fmt.Errorf("%s one-tx: %w", l.Name, err)
		}
		size, err := tableSize(ctx, url, table, events)
		if err != nil {
			return err
		}
		if err := clearJobs(ctx, url, table); err != nil {
			return err
		}
		batched, err := batchRate(ctx, m, url, events, batchClients, batch, layoutBatch(table, l), gen.with(fmt.Sprintf("b%d", k)))
		if err != nil {
			return fmt.Errorf("%s batched: %w", l.Name, err)
		}
		if err := clearJobs(ctx, url, table); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%-36s %10.0f %10.0f %22.2f %22.2f %10.0f\n", l.Name, one.Rate, batched.Rate, one.CPU.Backends, batched.CPU.Backends, size)
	}
	return nil
}

// benchService is the service under test, a process of its own so that its
// CPU and memory are measured alone.
type benchService struct {
	cmd *exec.Cmd
	url string
	db  *pgxpool.Pool
}

// childSetup is what a service the bench starts as a child needs: the
// bench's own executable and a free local address for it to listen on.
func childSetup() (exe, addr string, err error) {
	if exe, err = os.Executable(); err != nil {
		return "", "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", err
	}
	defer ln.Close()
	return exe, ln.Addr().String(), nil
}

func startBenchService(databaseURL string, role config.Role, groupCommit bool, workers, clients int, env ...string) (*benchService, error) {
	exe, addr, err := childSetup()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "serve", "--role="+string(role))
	cmd.Env = append(os.Environ(), "DATABASE_URL="+databaseURL, "HTTP_ADDR="+addr,
		"STRIPE_WEBHOOK_SECRET="+benchSecret, "GITHUB_WEBHOOK_SECRET="+benchSecret, "PADDLE_WEBHOOK_SECRET="+benchSecret,
		"LOG_LEVEL=warn", "CLAIM_GROUP_COMMIT="+strconv.FormatBool(groupCommit), "WORKERS="+strconv.Itoa(workers),
		"DB_MAX_CONNS="+strconv.Itoa(workers+clients/2+8), "CLAIM_TIMEOUT=10s")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &benchService{cmd: cmd, url: "http://" + addr}
	if s.db, err = pgxpool.New(context.Background(), databaseURL); err != nil {
		s.stop()
		return nil, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(s.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("service did not become ready")
		}
	}
}

// waitSettled waits until n events of the rows after id after are
// settled and none of them is pending, and returns when the last one
// settled. While events are pending it only asks whether one is:
// counting a backlog of thousands ten times a second would be work of the
// bench's own in the database it measures, whose backends the phase's CPU
// counts. Rows up to after (a seeded
// ledger's) are not the phase's, whatever their status, and are not read.
func (s *benchService) waitSettled(ctx context.Context, n int, after int64) (time.Time, error) {
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var claimed bool
		if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_event WHERE status = 'claimed' AND id > $1)`,
			after).Scan(&claimed); err != nil {
			return time.Time{}, err
		}
		if claimed {
			continue
		}
		// The rest only over the phase's rows, found by the primary key: a
		// seeded ledger's thousands of failed rows must not be read.
		var failed, settled int
		var last *time.Time
		if err := s.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE status = 'settled'),
			max(settled_at) FILTER (WHERE status = 'settled') FROM webhook_event WHERE id > $1`, after).Scan(&failed, &settled, &last); err != nil {
			return time.Time{}, err
		}
		if failed > 0 {
			return time.Time{}, fmt.Errorf("%d event(s) failed to apply", failed)
		}
		if settled >= n && last != nil {
			return *last, nil
		}
	}
	return time.Time{}, fmt.Errorf("events did not settle in 10 minutes")
}

func (s *benchService) stop() {
	if s.db != nil {
		s.db.Close()
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

// benchDatabase creates and migrates a database of the run's own on the
// server at admin; drop removes it.
func benchDatabase(ctx context.Context, admin, kind string) (url, name string, drop func(), err error) {
	name = fmt.Sprintf("hookledger_%s_%d", kind, time.Now().UnixNano())
	if url, err = devdb.EnsureDatabase(ctx, admin, name); err != nil {
		return "", "", nil, err
	}
	drop = func() { _ = devdb.DropDatabase(context.Background(), admin, name) }
	ccfg, err := pgx.ParseConfig(url)
	if err == nil {
		err = migrations.Up(stdlib.OpenDB(*ccfg))
	}
	if err != nil {
		drop()
		return "", "", nil, err
	}
	return url, name, drop, nil
}
