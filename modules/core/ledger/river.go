package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"

	"github.com/hookledger/hookledger/modules/core/metrics"
)

// FetchCooldown is the least time between two fetches of apply jobs. Jobs
// that arrive within it wait, and the first job fetched absorbs them
// (absorb.go): the longer it is, the more claim batches one apply
// transaction carries under load, and the longer an event waits for its
// apply when the workers are idle. Each fetch can carry a worker's job and
// up to maxAbsorbedJobs more, so it does not cap the rate of events.
const FetchCooldown = 20 * time.Millisecond

// FetchPollInterval is the longest a job waits for a fetch when no notice
// of its insert reached the workers: an inserting client notifies them at
// most once per FetchCooldown, and drops the notices in between, so the
// last jobs of a burst wait for the next poll (River's default is 1 s).
const FetchPollInterval = 100 * time.Millisecond

// RiverOptions shapes the one River client of a process.
type RiverOptions struct {
	// Workers is the apply concurrency; 0 makes an insert-only client that
	// works no jobs (serve --role=http, the CLI).
	Workers  int
	Registry *Registry
	Logger   *zap.Logger
	Metrics  *metrics.Set
	// Retention.Rows > 0 prunes settled ledger rows older than it, hourly,
	// on the elected leader, keeping their dedup keys for Retention.Keys.
	Retention Retention
	// SweepInterval is how often the leader sweeps for claimed events
	// with no live apply job (Sweep); 0 is DefaultSweepInterval.
	SweepInterval time.Duration
	// ApplyTimeout overrides the ledger's ApplyTimeout when positive.
	ApplyTimeout time.Duration
	// Middleware wraps job inserts and work (tracing).
	Middleware []rivertype.Middleware
	// ApplyLinger is how old a claim's apply job must be before it takes
	// its batch (Applier.Linger); 0 applies at once.
	ApplyLinger time.Duration

	// Payloads, when set, are what the process's claims keep for the
	// apply (StoreOptions.Payloads): the apply does not read them back.
	Payloads *Payloads
	// Sealer opens the payloads the apply reads (PAYLOAD_KEYS).
	Sealer *Sealer

	// lingerGate, when set, replaces the linger's timer (tests).
	lingerGate func(ctx context.Context)
}

// NewRiver builds River on db, the *sql.DB view of the process's pgx pool,
// so that jobs insert and complete inside ent's transactions. listener is a
// pool of its own for LISTEN (MaxConns 1); nil polls instead. The client
// works the apply jobs and every worker and periodic job modules
// registered; it only reads the registry. A registration that went wrong
// fails it in every role, an insert-only client's too, so a process of any
// role refuses to start on a registry that would not run.
func NewRiver(db *sql.DB, listener *pgxpool.Pool, o RiverOptions) (*river.Client[*sql.Tx], error) {
	driver := riverdatabasesql.New(db)
	if listener != nil {
		driver = riverdatabasesql.NewWithPgxListener(db, listener)
	}
	workers := river.NewWorkers()
	// The ledger's own kinds first: a module that registers one of them is
	// the one reported.
	applier := &Applier{DB: db, Registry: o.Registry, Logger: o.Logger.Named("apply"), Metrics: o.Metrics, Timeout: o.ApplyTimeout,
		Linger: o.ApplyLinger, lingerGate: o.lingerGate, Payloads: o.Payloads, Sealer: o.Sealer}
	river.AddWorker(workers, &ApplyWorker{Applier: applier})
	river.AddWorker(workers, &ApplyBatchWorker{Applier: applier})
	// The prune worker is registered with retention off too, so that the
	// kind stays the ledger's and a leftover job is cancelled, not run.
	river.AddWorker(workers, &PruneWorker{DB: db, Retention: o.Retention, Logger: o.Logger.Named("prune")})
	river.AddWorker(workers, &SweepWorker{DB: db, Logger: o.Logger.Named("sweep"), Metrics: o.Metrics})
	sweepEvery := o.SweepInterval
	if sweepEvery <= 0 {
		sweepEvery = DefaultSweepInterval
	}
	periodic := append([]*river.PeriodicJob(nil), o.Registry.periodic...)
	periodic = append(periodic, SweepPeriodically(sweepEvery))
	if o.Retention.Rows > 0 {
		periodic = append(periodic, PrunePeriodically(time.Hour))
	}
	if err := o.Registry.addWorkers(workers); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	cfg := clientConfig(SlogLogger(o.Logger.Named("river")), o.Middleware)
	cfg.PollOnly = listener == nil
	if o.Workers > 0 {
		cfg.Workers = workers
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.Workers}}
		cfg.ErrorHandler = &errorHandler{logger: o.Logger.Named("river")}
		cfg.PeriodicJobs = periodic
	}
	client, err := river.NewClient(driver, cfg)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return client, nil
}

// clientConfig is what every River client of a process shares, the
// claim's insert-only one included (newClaimInserter): how a job is
// inserted (its default attempts, the insert middleware, how often
// inserts wake the workers) and how it runs.
func clientConfig(logger *slog.Logger, middleware []rivertype.Middleware) *river.Config {
	return &river.Config{
		Logger:               logger,
		JobTimeout:           ApplyTimeout,
		RescueStuckJobsAfter: RescueStuckJobsAfter,
		MaxAttempts:          ApplyMaxAttempts,
		// River fetches at most once per cooldown: a fetch takes up to
		// one job per idle worker, and each absorbs the jobs waiting
		// beside it. A client that inserts also notifies the workers at
		// most once per cooldown: with River's default (100 ms), a job
		// inserted within 100 ms of the last notice waits for the
		// workers' next poll.
		FetchCooldown:     FetchCooldown,
		FetchPollInterval: FetchPollInterval,
		Middleware:        middleware,
	}
}

// newClaimInserter is the insert-only River client of the claim, on
// River's pgx driver: the claim runs on pgx (Store.claim). It inserts jobs
// as the process's client would (clientConfig); it works nothing, so it
// needs no pool of its own.
func newClaimInserter(middleware []rivertype.Middleware) *river.Client[pgx.Tx] {
	client, err := river.NewClient(riverpgxv5.New(nil), clientConfig(slog.New(slog.DiscardHandler), middleware))
	if err != nil {
		// An insert-only configuration of constants: it cannot be refused.
		panic(fmt.Sprintf("ledger: claim inserter: %v", err))
	}
	return client
}

// SlogLogger bridges a zap logger to slog for River and riverui, with
// their warnings and errors throttled (ThrottleHandler): a database outage
// logs each of their messages once per LogThrottleInterval, with the count
// of the repeats dropped, instead of many times a second.
func SlogLogger(l *zap.Logger) *slog.Logger {
	return slog.New(NewThrottleHandler(zapslog.NewHandler(l.Core()), LogThrottleInterval))
}

// errorHandler is the edge where job failures River sees are logged. The
// apply loop records its own failures, panics included; this logs the
// panics of other job kinds, which River then retries.
type errorHandler struct {
	logger *zap.Logger
}

func (h *errorHandler) HandleError(context.Context, *rivertype.JobRow, error) *river.ErrorHandlerResult {
	return nil
}

func (h *errorHandler) HandlePanic(_ context.Context, job *rivertype.JobRow, panicVal any, trace string) *river.ErrorHandlerResult {
	h.logger.Error("job panicked", zap.Int64("job_id", job.ID), zap.String("kind", job.Kind), zap.Any("panic", panicVal), zap.String("trace", trace))
	return nil
}

// River's job table. River's client inserts, completes, retries and
// cancels jobs; the ledger also reads and writes River's river_job table
// itself where River has no call for what it needs: the claim's job
// insert, the apply's absorb and completion, the apply jobs of an event
// (FindJobs, Requeue, Discard) and the Collector's counts. The statements
// below are all it runs on that table.

// claimJobSQL inserts the apply job of the events a claim statement
// inserted (its CTE ins), inside claimWithJobSQL: the job River's
// InsertManyTx would insert for them (claimRows), an apply_event job with
// fresh set for one event, an apply_batch job for more, none for none, in
// the default queue with the apply's attempt budget. With $17 it also
// sends River's insert notice, which wakes the workers, on the channel
// River listens on; where that name would pass PostgreSQL's 63 bytes,
// which pg_notify refuses (a schema named with more than 50), it sends
// none and the workers poll, as River's listener, whose LISTEN PostgreSQL
// truncates, could not hear it anyway.
var claimJobSQL = `
	INSERT INTO river_job (state, max_attempts, priority, queue, kind, args, metadata, tags)
	SELECT 'available', ` + strconv.Itoa(ApplyMaxAttempts) + `, 1, '` + river.QueueDefault + `',
		CASE WHEN count(*) = 1 THEN '` + ApplyArgs{}.Kind() + `' ELSE '` + ApplyBatchArgs{}.Kind() + `' END,
		CASE WHEN count(*) = 1
			THEN jsonb_build_object('namespace', min(namespace), 'event_id', min(event_id), 'fresh', true)
			ELSE jsonb_build_object('events', jsonb_agg(jsonb_build_object('namespace', namespace, 'event_id', event_id)))
		END,
		'{}', '{}'
	FROM ins
	HAVING count(*) > 0
	RETURNING CASE WHEN $17::boolean AND octet_length(current_schema()) <= 50
		THEN pg_notify(current_schema() || '.river_insert', '{"queue": "` + river.QueueDefault + `"}')::text END AS notice`

// absorbSQL takes the claims' jobs waiting (absorbable) in queue $1, other
// than job $2, for the apply of job $2 to absorb (absorb.go), oldest first
// as River would fetch them: it locks up to $3 that each fit in $4 events,
// skipping any that River or another apply holds, and keeps those whose
// events fit, counted in order, in $4. A job it locked and did not keep
// stays as it was, and waits for this transaction to end; one larger than
// the budget is never locked. The index river_job_absorbable holds the
// absorbable jobs only, so the statement reads no other job however many
// wait.
const absorbSQL = completeAbsorbed + `
	FROM (SELECT id FROM (
			SELECT id, sum(` + jobEvents + `) OVER (ORDER BY priority, scheduled_at, id) AS upto FROM (
				SELECT id, kind, args, priority, scheduled_at FROM river_job
				WHERE ` + absorbable + ` AND queue = $1 AND id <> $2 AND ` + jobEvents + ` <= $4
				ORDER BY priority, scheduled_at, id LIMIT $3
				FOR UPDATE SKIP LOCKED) locked) sized
		WHERE upto <= $4) w
	WHERE j.id = w.id
	RETURNING j.id, ` + absorbedEvents

// reabsorbSQL takes again those of jobs $1 that still wait, for the split
// of a failed apply that had absorbed them: the split completes them and
// runs their events in jobs of their own.
const reabsorbSQL = completeAbsorbed + `
	FROM (SELECT id FROM river_job WHERE id = ANY($1) AND state = 'available' AND attempted_at IS NULL
		ORDER BY id FOR UPDATE SKIP LOCKED) w
	WHERE j.id = w.id
	RETURNING j.id, ` + absorbedEvents

// completeAbsorbed marks the absorbed jobs w completed, as a run of
// River's would: one attempt, made and finished now.
const completeAbsorbed = `
	UPDATE river_job j SET state = 'completed', attempt = j.attempt + 1, attempted_at = now(), finalized_at = now()`

// absorbable selects the claims' jobs that wait and never ran, and whose
// arguments have the shape of a claim's: a job that has not is left to
// River, whose run of it fails it alone. (The ids of reabsorbSQL were
// absorbable; it finds them by key.)
const absorbable = `state = 'available' AND scheduled_at <= now() AND attempted_at IS NULL
	AND ((kind = 'apply_batch' AND jsonb_typeof(args->'events') = 'array')
		OR (kind = 'apply_event' AND args @> '{"fresh": true}' AND jsonb_typeof(args->'event_id') = 'string'))`

// jobEvents is the number of events a job carries.
const jobEvents = `CASE kind WHEN 'apply_batch' THEN jsonb_array_length(args->'events') ELSE 1 END`

// absorbedEvents is an absorbed job's events, as a JSON array of keys.
const absorbedEvents = `CASE j.kind WHEN 'apply_batch' THEN j.args->'events' ELSE jsonb_build_array(j.args) END`

// completeRunningSQL completes the running job $1 in the apply's
// transaction, as river.JobCompleteTx does for a job that records no
// output (no metadata updates, which no apply makes): River's statement
// for it sets the state of many jobs from arrays, which its database/sql
// driver encodes and decodes as text, about a millisecond of the
// service's CPU per apply. A job no longer running (rescued and taken by
// another worker) is left as it is, as River leaves it. River's own
// completion after the apply then finds the job completed, as after
// JobCompleteTx.
const completeRunningSQL = `
	WITH done AS (UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1 AND state = 'running')
	SELECT EXISTS (SELECT 1 FROM river_job WHERE id = $1)`

// completeRunning runs completeRunningSQL for job.
func completeRunning(ctx context.Context, tx *Tx, job *rivertype.JobRow) error {
	if job.State != rivertype.JobStateRunning {
		return fmt.Errorf("job %d is %s, not running", job.ID, job.State)
	}
	var exists bool
	if err := tx.QueryRowContext(ctx, completeRunningSQL, job.ID).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return rivertype.ErrNotFound
	}
	return nil
}

// absorb runs one of the statements above and returns the jobs it
// completed.
func absorb(ctx context.Context, tx *Tx, query string, args ...any) ([]absorbedJob, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, &dbError{fmt.Errorf("absorb waiting jobs: %w", err)}
	}
	defer rows.Close()
	var jobs []absorbedJob
	for rows.Next() {
		var (
			j   absorbedJob
			raw []byte
		)
		if err := rows.Scan(&j.id, &raw); err != nil {
			return nil, &dbError{fmt.Errorf("absorb waiting jobs: %w", err)}
		}
		if err := json.Unmarshal(raw, &j.events); err != nil {
			// Elements that are not keys: the apply rolls back as in an
			// outage, records nothing, and runs again alone (mayAbsorb).
			return nil, &dbError{fmt.Errorf("absorb job %d: %w", j.id, err)}
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, &dbError{fmt.Errorf("absorb waiting jobs: %w", err)}
	}
	return jobs, nil
}

// The apply jobs that carry event ($1 namespace, $2 event id): its own,
// and the batch it was claimed in (found through a GIN index on the
// batch's events).
const (
	ownApplyJob  = `kind = 'apply_event' AND args->>'namespace' = $1 AND args->>'event_id' = $2`
	batchHolding = `kind = 'apply_batch' AND args->'events' @> jsonb_build_array(jsonb_build_object('namespace', $1::text, 'event_id', $2::text))`
)

// findJobsSQL reads the newest apply job of each event $1[i]/$2[i], its
// own or its batch's (ownApplyJob, batchHolding), each through its index.
// OFFSET 0 keeps the jobs' lookup apart from their ORDER BY id DESC
// LIMIT 1: merged, the planner may walk River's whole table backwards by
// id for each event instead, expecting an early match that never comes.
var findJobsSQL = func() string {
	each := keysOf("k")
	return `
	SELECT k.namespace, k.event_id, j.id, j.kind, j.state, j.attempt, j.max_attempts, j.scheduled, j.errors
	FROM unnest($1::text[], $2::text[]) AS k(namespace, event_id)
	CROSS JOIN LATERAL (
		SELECT id, kind, state, attempt, max_attempts,
			CASE WHEN state IN ('available', 'scheduled', 'retryable') THEN scheduled_at END AS scheduled,
			COALESCE(to_jsonb(errors), '[]'::jsonb) AS errors
		FROM (SELECT * FROM river_job
			WHERE (` + each.Replace(ownApplyJob) + `) OR (` + each.Replace(batchHolding) + `)
			OFFSET 0) AS carrying
		ORDER BY id DESC LIMIT 1) AS j`
}()

// eventJob is an apply job that carries an event.
type eventJob struct {
	id     int64
	state  rivertype.JobState
	batch  bool
	forced bool
}

// finished reports whether River will not run j again.
func (j eventJob) finished() bool {
	switch j.state {
	case rivertype.JobStateCompleted, rivertype.JobStateCancelled, rivertype.JobStateDiscarded:
		return true
	}
	return false
}

// jobsOf returns the apply jobs that carry an event, newest first: every
// job of its own that River still has, and the unfinished batch it was
// claimed in (a finished batch will not apply it again).
func jobsOf(ctx context.Context, tx *Tx, namespace, eventID string) ([]eventJob, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT id, state, kind = 'apply_batch', COALESCE((args->>'force')::boolean, false)
		FROM river_job
		WHERE (`+ownApplyJob+`)
			OR (`+batchHolding+` AND finalized_at IS NULL AND state NOT IN ('completed', 'cancelled', 'discarded'))
		ORDER BY id DESC`, namespace, eventID)
	if err != nil {
		return nil, fmt.Errorf("find jobs of %s/%s: %w", namespace, eventID, err)
	}
	defer rows.Close()
	var out []eventJob
	for rows.Next() {
		var j eventJob
		if err := rows.Scan(&j.id, &j.state, &j.batch, &j.forced); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// lockJob locks River's job id in tx without waiting: PostgreSQL's
// 55P03 (lock_not_available) when another transaction holds it,
// sql.ErrNoRows when River no longer has it.
func lockJob(ctx context.Context, tx *Tx, id int64) error {
	return tx.QueryRowContext(ctx, `SELECT id FROM river_job WHERE id = $1 FOR UPDATE NOWAIT`, id).Scan(new(int64))
}

// renewAttempts starts River's job id again from attempt 0 with a whole
// budget of attempts (ApplyMaxAttempts), as a new job; its errors stay,
// the history of its earlier attempts. It is no longer a claim's fresh
// job: it runs with its own events (mayAbsorb).
func renewAttempts(ctx context.Context, tx *Tx, id int64) error {
	_, err := tx.ExecContext(ctx, `UPDATE river_job SET attempt = 0, max_attempts = $2, args = args - 'fresh' WHERE id = $1`, id, ApplyMaxAttempts)
	return err
}

// unfinishedJobsSQL counts River's jobs not yet finalized, by kind and
// state, for the Collector.
const unfinishedJobsSQL = `
	SELECT kind, state::text, count(*) FROM river_job
	WHERE state IN ('available', 'scheduled', 'retryable', 'running', 'pending')
	GROUP BY kind, state`

// liveStates are River's states of a job it will still run.
const liveStates = `('available', 'scheduled', 'retryable', 'running', 'pending')`

// liveJobsSQL counts the live apply jobs that carry event $1/$2: its own,
// and the unfinished batches that hold it.
const liveJobsSQL = `SELECT count(*) FROM river_job
	WHERE ((` + ownApplyJob + `) OR (` + batchHolding + `)) AND state IN ` + liveStates
