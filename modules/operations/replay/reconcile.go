package replay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/modules/core/intake"
	"github.com/hookledger/hookledger/modules/core/ledger"
)

// overlap re-reads a little before the watermark: an event is listed by its
// created time, which can trail the moment it becomes listable.
const overlap = 5 * time.Minute

// ReconcileConfig turns on scheduled Stripe reconciliation.
type ReconcileConfig struct {
	DB     *sql.DB
	Source *intake.Source
	Stripe StripeOptions // APIBase, APIKey, HTTP
	// Interval between runs; Window is how far the first run looks back.
	Interval time.Duration
	Window   time.Duration
	Logger   *zap.Logger
	// Middleware wraps the claims' job inserts, as the process's River
	// client's wraps its own (tracing).
	Middleware []rivertype.Middleware
}

// RegisterReconcile schedules reconciliation on the elected leader.
func RegisterReconcile(reg *ledger.Registry, cfg ReconcileConfig) {
	ledger.AddWorker(reg, &reconcileWorker{cfg: cfg})
	reg.AddPeriodic(river.NewPeriodicJob(river.PeriodicInterval(cfg.Interval),
		func() (river.JobArgs, *river.InsertOpts) { return ReconcileArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "reconcile_stripe"}))
}

// ReconcileArgs is the reconcile_stripe job.
type ReconcileArgs struct{}

// Kind names the job in River.
func (ReconcileArgs) Kind() string { return "reconcile_stripe" }

// InsertOpts keeps one run in flight at a time.
func (ReconcileArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 3, UniqueOpts: river.UniqueOpts{
		ByState: []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning, rivertype.JobStateRetryable, rivertype.JobStateScheduled},
	}}
}

type reconcileWorker struct {
	river.WorkerDefaults[ReconcileArgs]
	cfg ReconcileConfig
}

// Work replays Stripe's undelivered events since the watermark, then moves
// the watermark to the start of this run.
func (w *reconcileWorker) Work(ctx context.Context, _ *river.Job[ReconcileArgs]) error {
	// The claims insert their apply jobs through the River client working
	// this job, as any job of a module's own inserts outside an apply.
	client, err := river.ClientFromContextSafely[*sql.Tx](ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	since, err := Watermark(ctx, w.cfg.DB, w.cfg.Source.Name)
	if err != nil {
		return err
	}
	if since.IsZero() {
		since = now.Add(-w.cfg.Window)
	}
	o := w.cfg.Stripe
	o.Since, o.Until, o.FailedOnly = since.Add(-overlap), now, true
	sink := &Direct{Source: w.cfg.Source, Claimer: ledger.NewStore(w.cfg.DB, client, ledger.StoreOptions{Middleware: w.cfg.Middleware})}
	stats, err := Stripe(ctx, o, sink, nil)
	w.cfg.Logger.Info("reconciled stripe events", zap.Time("since", o.Since), zap.Int64("fetched", stats.Fetched),
		zap.Int64("new", stats.New), zap.Int64("duplicate", stats.Duplicate), zap.Int64("failed", stats.Failed))
	if err != nil {
		return err
	}
	return setWatermark(ctx, w.cfg.DB, w.cfg.Source.Name, now)
}

// Timeout allows a long window to be paged through.
func (w *reconcileWorker) Timeout(*river.Job[ReconcileArgs]) time.Duration { return 10 * time.Minute }

// Watermark reads how far source was reconciled; zero when never.
func Watermark(ctx context.Context, db *sql.DB, source string) (time.Time, error) {
	var t time.Time
	err := db.QueryRowContext(ctx, `SELECT watermark FROM replay_watermark WHERE source = $1`, source).Scan(&t)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("read watermark of %s: %w", source, err)
	}
	return t, nil
}

// setWatermark records that source is reconciled up to t.
func setWatermark(ctx context.Context, db *sql.DB, source string, t time.Time) error {
	_, err := db.ExecContext(ctx, `
		INSERT INTO replay_watermark (source, watermark) VALUES ($1, $2)
		ON CONFLICT (source) DO UPDATE SET watermark = GREATEST(replay_watermark.watermark, EXCLUDED.watermark), updated_at = CURRENT_TIMESTAMP`,
		source, t)
	if err != nil {
		return fmt.Errorf("write watermark of %s: %w", source, err)
	}
	return nil
}
