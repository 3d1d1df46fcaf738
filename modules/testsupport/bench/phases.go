package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"time"

	"github.com/hookledger/hookledger/config"
)

// The optional phases of a bench run, each measured against its own
// control in the same run, after the main phases: prune under ingest
// (--prune-rows), the claim with kept keys (--kept-keys) and sealed
// payloads (--sealed).

// runPhases runs the optional phases o asks for.
func runPhases(ctx context.Context, m *meter, url string, gen *payloads, o Options, r *Report, logf func(string, ...any)) error {
	if o.KeptKeys > 0 {
		k, err := runKeptKeys(ctx, m, url, gen, o, logf)
		if err != nil {
			return fmt.Errorf("kept keys: %w", err)
		}
		r.KeptKeys = k
	}
	if o.Sealed {
		s, err := runSealed(ctx, m, url, gen, o, logf)
		if err != nil {
			return fmt.Errorf("sealed payloads: %w", err)
		}
		r.Sealed = s
	}
	if o.PruneRows > 0 {
		p, err := runPrune(ctx, m, url, gen, o, logf)
		if err != nil {
			return fmt.Errorf("prune under ingest: %w", err)
		}
		r.Prune = p
	}
	return nil
}

func printPhases(w io.Writer, r *Report) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	if k := r.KeptKeys; k != nil {
		p("kept keys: ingest alone (serve --role=http) with webhook_key empty, holding %d keys, and empty again:", k.Keys)
		for _, x := range []struct {
			name string
			run  serviceRun
		}{{"empty", k.Empty}, {fmt.Sprintf("%d keys", k.Keys), k.Kept}, {"empty again", k.EmptyAfter}} {
			p("  %-16s %8.0f events/s  service %.3f  pg backends %.3f ms per event  p99 %.1f ms",
				x.name, x.run.Ingest, x.run.IngestCPU.Service, x.run.IngestCPU.Backends, x.run.Peak.P99)
		}
		p("  kept/empty (mean of the two empty runs): rate %.2fx  CPU per event %.2fx  pg backends' CPU per event %.2fx",
			k.RateRatio, k.CPURatio, k.BackendsRatio)
	}
	if s := r.Sealed; s != nil {
		p("sealed payloads (PAYLOAD_KEYS set) against plaintext, the service at peak:")
		for _, x := range []struct {
			name string
			run  serviceRun
		}{{"plaintext", s.Plain}, {"sealed", s.Sealed}} {
			p("  %-10s ingest %6.0f/s  end-to-end %6.0f/s  CPU per event ingest %.3f ms  end-to-end %.3f ms (service + backends)  p99 %.1f ms",
				x.name, x.run.Ingest, x.run.EndToEnd, cpuMS(x.run.IngestCPU), cpuMS(x.run.EndToEndCPU), x.run.Peak.P99)
		}
		p("  sealed/plaintext: ingest %.2fx  end-to-end %.2fx  CPU per event ingest %.2fx  end-to-end %.2fx",
			s.IngestRatio, s.EndToEndRatio, s.IngestCPURatio, s.EndToEndCPURatio)
	}
	if x := r.Prune; x != nil {
		p("prune under ingest: %d settled rows older than RETENTION seeded; prune deleted %d in %.1f s", x.Rows, x.Deleted, x.PruneSeconds)
		p("  %-22s %10s %10s %10s", "", "no prune", "prune", "ratio")
		p("  %-22s %10.0f %10.0f %9.2fx", "peak ingest, events/s", x.Without.Rate, x.With.Rate, x.With.Rate/x.Without.Rate)
		p("  %-22s %10.1f %10.1f %9.2fx", "p99 at peak, ms", x.Without.PeakP99, x.With.PeakP99, x.PeakP99Ratio)
		p("  %-22s %10.1f %10.1f %9.2fx", "p99 at half rate, ms", x.Without.HalfP99, x.With.HalfP99, x.HalfP99Ratio)
		p("  %-22s %10.1f %10.1f %9.2fx", "p50 at half rate, ms", x.Without.HalfP50, x.With.HalfP50, x.With.HalfP50/x.Without.HalfP50)
		p("  (half rate: %.0f events/s, open loop; %d and %d rounds)", x.HalfRate, x.Without.Rounds, x.With.Rounds)
	}
}

// measureService starts the service in role with env added, drives the
// peak from gen, and, in role all, waits for its events to settle.
func measureService(ctx context.Context, m *meter, url string, gen *payloads, o Options, role config.Role, env ...string) (serviceRun, error) {
	after, err := lastEventID(ctx, m)
	if err != nil {
		return serviceRun{}, err
	}
	svc, err := startBenchService(url, role, o.GroupCommit, o.Workers, o.Clients, env...)
	if err != nil {
		return serviceRun{}, err
	}
	defer svc.stop()
	m.servicePID = svc.cmd.Process.Pid
	defer func() { m.servicePID = 0 }()
	var r serviceRun
	snap := m.snapshot(ctx)
	start := time.Now()
	lat, errs := drive(ctx, svc.url, gen, o.Events, o.Clients, 0)
	r.Ingest = float64(o.Events) / time.Since(start).Seconds()
	r.IngestCPU = m.since(ctx, snap, o.Events)
	r.Peak = percentiles(lat)
	if errs > 0 {
		return r, fmt.Errorf("%d request(s) failed", errs)
	}
	if role != config.RoleAll {
		return r, nil
	}
	last, err := svc.waitSettled(ctx, o.Events, after)
	if err != nil {
		return r, err
	}
	r.EndToEnd = float64(o.Events) / last.Sub(start).Seconds()
	r.EndToEndCPU = m.since(ctx, snap, o.Events)
	return r, nil
}

// keptKeysReport is ingest with webhook_key empty and holding Keys keys.
type keptKeysReport struct {
	Keys        int        `json:"keys"`
	SeedSeconds float64    `json:"seed_seconds"`
	Empty       serviceRun `json:"empty"`
	Kept        serviceRun `json:"kept"`
	EmptyAfter  serviceRun `json:"empty_after"`
	// Ratios are kept over the mean of the two empty runs: the rate, the
	// CPU per event of the service and its backends, and the backends'.
	RateRatio     float64 `json:"rate_kept_to_empty"`
	CPURatio      float64 `json:"cpu_kept_to_empty"`
	BackendsRatio float64 `json:"pg_backends_cpu_kept_to_empty"`
}

// seedKeysSQL writes $1 kept keys: 16 bytes of SHA-256 each, received
// over the last 400 days, as prune leaves them.
const seedKeysSQL = `INSERT INTO webhook_key (key_hash, received_on)
	SELECT substring(sha256(int8send(g)) FROM 1 FOR 16), current_date - (g % 400)::int
	FROM generate_series(1, $1::bigint) AS g
	ON CONFLICT DO NOTHING`

// runKeptKeys measures ingest alone with webhook_key empty, then holding
// o.KeptKeys keys, then empty again.
func runKeptKeys(ctx context.Context, m *meter, url string, gen *payloads, o Options, logf func(string, ...any)) (*keptKeysReport, error) {
	k := &keptKeysReport{Keys: o.KeptKeys}
	run := func(name string, into *serviceRun) error {
		if err := clearJobs(ctx, url, "public.webhook_event"); err != nil {
			return err
		}
		logf("bench: kept keys, ingest alone with webhook_key %s", name)
		var err error
		*into, err = measureService(ctx, m, url, gen.with("keys"), o, config.RoleHTTP)
		return err
	}
	if err := clearJobs(ctx, url, "public.webhook_key"); err != nil {
		return nil, err
	}
	if err := run("empty", &k.Empty); err != nil {
		return nil, err
	}
	logf("bench: seeding %d kept keys", o.KeptKeys)
	start := time.Now()
	if _, err := m.db.Exec(ctx, seedKeysSQL, o.KeptKeys); err != nil {
		return nil, err
	}
	if _, err := m.db.Exec(ctx, `VACUUM (ANALYZE) webhook_key`); err != nil {
		return nil, err
	}
	_, _ = m.db.Exec(ctx, `CHECKPOINT`)
	k.SeedSeconds = time.Since(start).Seconds()
	if err := run(fmt.Sprintf("holding %d keys", o.KeptKeys), &k.Kept); err != nil {
		return nil, err
	}
	if err := clearJobs(ctx, url, "public.webhook_key"); err != nil {
		return nil, err
	}
	if err := run("empty again", &k.EmptyAfter); err != nil {
		return nil, err
	}
	e1, e2 := k.Empty, k.EmptyAfter
	k.RateRatio = k.Kept.Ingest / ((e1.Ingest + e2.Ingest) / 2)
	k.CPURatio = cpuMS(k.Kept.IngestCPU) / ((cpuMS(e1.IngestCPU) + cpuMS(e2.IngestCPU)) / 2)
	k.BackendsRatio = k.Kept.IngestCPU.Backends / ((e1.IngestCPU.Backends + e2.IngestCPU.Backends) / 2)
	return k, nil
}

// sealedReport is the service at peak with plaintext and sealed payloads.
type sealedReport struct {
	Plain            serviceRun `json:"plaintext"`
	Sealed           serviceRun `json:"sealed"`
	IngestRatio      float64    `json:"ingest_sealed_to_plaintext"`
	EndToEndRatio    float64    `json:"end_to_end_sealed_to_plaintext"`
	IngestCPURatio   float64    `json:"ingest_cpu_sealed_to_plaintext"`
	EndToEndCPURatio float64    `json:"end_to_end_cpu_sealed_to_plaintext"`
}

// benchPayloadKey is the bench's PAYLOAD_KEYS: 32 bytes, base64.
var benchPayloadKey = base64.StdEncoding.EncodeToString([]byte("hookledger bench payload key 32B"))

// runSealed measures the service at peak with plaintext payloads, then
// with PAYLOAD_KEYS set, each on an emptied ledger.
func runSealed(ctx context.Context, m *meter, url string, gen *payloads, o Options, logf func(string, ...any)) (*sealedReport, error) {
	s := &sealedReport{}
	for _, x := range []struct {
		name string
		into *serviceRun
		env  []string
	}{{"plaintext", &s.Plain, nil}, {"sealed", &s.Sealed, []string{"PAYLOAD_KEYS=" + benchPayloadKey}}} {
		if err := clearJobs(ctx, url, "public.webhook_event", "public.subscription"); err != nil {
			return nil, err
		}
		logf("bench: the service at peak, payloads %s", x.name)
		var err error
		if *x.into, err = measureService(ctx, m, url, gen.with("sealed"), o, config.RoleAll, x.env...); err != nil {
			return nil, fmt.Errorf("%s: %w", x.name, err)
		}
	}
	s.IngestRatio, s.EndToEndRatio = s.Sealed.Ingest/s.Plain.Ingest, s.Sealed.EndToEnd/s.Plain.EndToEnd
	s.IngestCPURatio = cpuMS(s.Sealed.IngestCPU) / cpuMS(s.Plain.IngestCPU)
	s.EndToEndCPURatio = cpuMS(s.Sealed.EndToEndCPU) / cpuMS(s.Plain.EndToEndCPU)
	return s, nil
}

// pruneReport is ingest with and without prune deleting Rows rows.
type pruneReport struct {
	Rows         int           `json:"seeded_rows"`
	Deleted      int64         `json:"deleted_rows"`
	PruneSeconds float64       `json:"prune_seconds"`
	HalfRate     float64       `json:"half_rate_events_per_sec"`
	Without      pruneLatency  `json:"without_prune"`
	With         pruneLatency  `json:"with_prune"`
	PeakP99Ratio float64       `json:"peak_p99_with_to_without"`
	HalfP99Ratio float64       `json:"half_rate_p99_with_to_without"`
	Output       string        `json:"prune_output"`
	took         time.Duration `json:"-"`
}

// pruneLatency is rounds of ingest: each a peak of o.Events events, then
// o.Events/2 at the half rate.
type pruneLatency struct {
	Rounds  int     `json:"rounds"`
	Rate    float64 `json:"peak_events_per_sec"`
	PeakP99 float64 `json:"peak_p99_ms"`
	HalfP50 float64 `json:"half_rate_p50_ms"`
	HalfP99 float64 `json:"half_rate_p99_ms"`
}

// pruneBaselineRounds is the rounds of ingest measured without prune
// before it starts.
const pruneBaselineRounds = 3

// pruneSample gathers rounds of ingest.
type pruneSample struct {
	peak, half []time.Duration
	events     int
	took       time.Duration
	rounds     int
}

func (s *pruneSample) add(peak, half []time.Duration, events int, took time.Duration) {
	s.peak, s.half = append(s.peak, peak...), append(s.half, half...)
	s.events += events
	s.took += took
}

func (s *pruneSample) summary() pruneLatency {
	peak, half := percentiles(s.peak), percentiles(s.half)
	return pruneLatency{Rounds: s.rounds, Rate: float64(s.events) / s.took.Seconds(), PeakP99: peak.P99, HalfP50: half.P50, HalfP99: half.P99}
}

// deletedRE reads the rows prune deleted from its output.
var deletedRE = regexp.MustCompile(`deleted (\d+) settled event`)

// runPrune seeds o.PruneRows settled rows older than RETENTION and
// measures ingest alone (serve --role=http, which runs no prune of its
// own) in rounds, first with nothing else running, then while
// `hookledger-dev prune --yes` runs as a process of its own, and then
// alone again until both sides have run as many rounds.
func runPrune(ctx context.Context, m *meter, url string, gen *payloads, o Options, logf func(string, ...any)) (*pruneReport, error) {
	x := &pruneReport{Rows: o.PruneRows}
	if err := clearJobs(ctx, url, "public.webhook_event", "public.webhook_key", "public.delivery_stat"); err != nil {
		return nil, err
	}
	// The newest seeded row is a day older than the default RETENTION.
	seededUntil := time.Now().Add(-90*24*time.Hour - 24*time.Hour)
	logf("bench: seeding %d ledger rows older than RETENTION", o.PruneRows)
	if _, err := seedLedger(ctx, m.db, o.Testdata, o.PruneRows, seededUntil, logf); err != nil {
		return nil, err
	}
	if _, err := m.db.Exec(ctx, `UPDATE webhook_event SET status = 'settled', settled_at = received_at WHERE status = 'claimed'`); err != nil {
		return nil, err
	}
	if _, err := m.db.Exec(ctx, `VACUUM (ANALYZE) webhook_event, delivery_stat`); err != nil {
		return nil, err
	}
	_, _ = m.db.Exec(ctx, `CHECKPOINT`)

	svc, err := startBenchService(url, config.RoleHTTP, o.GroupCommit, o.Workers, o.Clients)
	if err != nil {
		return nil, err
	}
	defer svc.stop()
	// Every round's events come from phase ranges of their own.
	phase, used := gen.with("prune"), 0
	next := func(prefix string, n int) *payloads {
		if used+n > PhaseEvents {
			phase, used = gen.with("prune"), 0
		}
		g := phase.at(fmt.Sprintf("%s%d", prefix, used), used)
		used += n
		return g
	}
	// round drives one round of ingest into into: a peak of o.Events
	// events, then o.Events/2 at the half rate (set by the first round).
	round := func(into *pruneSample) error {
		start := time.Now()
		lat, errs, failure := driveFailure(ctx, svc.url, next("prune", o.Events), o.Events, o.Clients, 0)
		into.add(lat, nil, o.Events, time.Since(start))
		if x.HalfRate == 0 {
			x.HalfRate = float64(o.Events) / time.Since(start).Seconds() / 2
		}
		half, errs2, failure2 := driveFailure(ctx, svc.url, next("prune-half", o.Events/2), o.Events/2, o.Clients, x.HalfRate)
		into.add(nil, half, 0, 0)
		into.rounds++
		if errs+errs2 > 0 {
			return fmt.Errorf("%d request(s) failed, the first: %s", errs+errs2, cmp.Or(failure, failure2))
		}
		return nil
	}
	// A round the service warms up in (its pool, its caches), not counted.
	if err := round(&pruneSample{}); err != nil {
		return nil, err
	}
	x.HalfRate = 0
	var without, with pruneSample
	logf("bench: ingest without prune, %d rounds", pruneBaselineRounds)
	for range pruneBaselineRounds {
		if err := round(&without); err != nil {
			return nil, err
		}
	}

	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "prune", "--yes")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url, "LOG_LEVEL=warn", "STRIPE_WEBHOOK_SECRET="+benchSecret)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	logf("bench: ingest while prune runs")
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		x.took = time.Since(start)
		done <- err
	}()
	var pruneErr error
	for finished := false; !finished; {
		if err := round(&with); err != nil {
			return nil, err
		}
		select {
		case pruneErr = <-done:
			finished = true
		default:
		}
	}
	x.PruneSeconds = x.took.Seconds()
	x.Output = out.String()
	if pruneErr != nil {
		return nil, fmt.Errorf("prune: %w: %s", pruneErr, x.Output)
	}
	if mm := deletedRE.FindStringSubmatch(x.Output); mm != nil {
		x.Deleted, _ = strconv.ParseInt(mm[1], 10, 64)
	}
	// The control samples as many rounds as prune ran beside, the rest
	// after it once a VACUUM has cleared what it deleted: both sides see
	// as long a stretch of the machine's noise.
	if without.rounds < with.rounds {
		if _, err := m.db.Exec(ctx, `VACUUM webhook_event`); err != nil {
			return nil, err
		}
		logf("bench: ingest without prune, %d rounds more", with.rounds-without.rounds)
		for without.rounds < with.rounds {
			if err := round(&without); err != nil {
				return nil, err
			}
		}
	}
	x.Without, x.With = without.summary(), with.summary()
	x.PeakP99Ratio, x.HalfP99Ratio = x.With.PeakP99/x.Without.PeakP99, x.With.HalfP99/x.Without.HalfP99
	return x, nil
}
