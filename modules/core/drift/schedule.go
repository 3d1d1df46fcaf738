package drift

import (
	"context"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
)

// ScheduleConfig turns on the scheduled check.
type ScheduleConfig struct {
	// Provider names the provider in the log ("stripe").
	Provider  string
	Namespace string
	Modules   []Module
	// Interval between checks (DRIFT_INTERVAL).
	Interval time.Duration
	Metrics  *metrics.Set
	Logger   *zap.Logger
	// Ledger records the erased subjects (Options.Ledger).
	Ledger ledger.Queryer
}

// RegisterSchedule checks the namespace every interval, on the elected
// leader's schedule: the process that works the job sets
// hookledger_drift_objects{kind} and logs a summary. It repairs nothing.
func RegisterSchedule(reg *ledger.Registry, cfg ScheduleConfig) {
	ledger.AddWorker(reg, &checkWorker{cfg: cfg})
	reg.AddPeriodic(river.NewPeriodicJob(river.PeriodicInterval(cfg.Interval),
		func() (river.JobArgs, *river.InsertOpts) { return CheckArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "drift_check"}))
}

// CheckArgs is the drift_check job.
type CheckArgs struct{}

// Kind names the job in River.
func (CheckArgs) Kind() string { return "drift_check" }

// InsertOpts keeps one check in flight at a time.
func (CheckArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 3, UniqueOpts: river.UniqueOpts{
		ByState: []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning, rivertype.JobStateRetryable, rivertype.JobStateScheduled},
	}}
}

type checkWorker struct {
	river.WorkerDefaults[CheckArgs]
	cfg ScheduleConfig
}

// summaryIDs is how many drifted ids the summary names.
const summaryIDs = 20

// Work checks every module and publishes the counts. A check that fails
// (the provider failing past its retries) is the job's error, for River
// to retry and River UI to show; the gauges keep the last complete
// check's counts.
func (w *checkWorker) Work(ctx context.Context, _ *river.Job[CheckArgs]) error {
	r, err := Check(ctx, Options{Namespace: w.cfg.Namespace, Modules: w.cfg.Modules, Ledger: w.cfg.Ledger})
	if err != nil {
		return err
	}
	fields := []zap.Field{zap.String("namespace", w.cfg.Namespace), zap.Int("erased_apart", len(r.Erased))}
	for kind, n := range r.Drifted() {
		w.cfg.Metrics.DriftObjects.WithLabelValues(kind).Set(float64(n))
		fields = append(fields, zap.Int(kind, n))
	}
	if len(r.Findings) == 0 {
		w.cfg.Logger.Info("no drift", fields...)
		return nil
	}
	ids := make([]string, 0, min(len(r.Findings), summaryIDs))
	for _, f := range r.Findings[:cap(ids)] {
		ids = append(ids, f.Kind+"/"+f.ID+" ("+string(f.Drift)+")")
	}
	w.cfg.Logger.Warn("drift found: hookledger drift "+w.cfg.Provider+" reports it, --fix repairs it", append(fields, zap.Strings("drifted", ids))...)
	return nil
}

// Timeout allows a large account to be paged through.
func (w *checkWorker) Timeout(*river.Job[CheckArgs]) time.Duration { return time.Hour }
