package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
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
	periodic := append([]*river.PeriodicJob(nil), o.Registry.periodic...)
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
