package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/modules/metrics"
)

// EventKey is a ledger key.
type EventKey struct {
	Namespace string `json:"namespace"`
	EventID   string `json:"event_id"`
}

// less orders ledger keys. Transactions that lock ledger rows in this order
// cannot deadlock on them.
func (k EventKey) less(o EventKey) bool {
	if k.Namespace != o.Namespace {
		return k.Namespace < o.Namespace
	}
	return k.EventID < o.EventID
}

// ApplyBatchArgs applies the events one group commit claimed, in one
// transaction: a handful of round trips for the batch instead of five per
// event. It carries ledger keys only.
type ApplyBatchArgs struct {
	Events []EventKey `json:"events"`
}

// Kind names the job in River.
func (ApplyBatchArgs) Kind() string { return "apply_batch" }

// InsertOpts gives batch jobs the apply job's retries.
func (ApplyBatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: ApplyMaxAttempts}
}

// ApplyBatchWorker is River's worker for ApplyBatchArgs.
type ApplyBatchWorker struct {
	river.WorkerDefaults[ApplyBatchArgs]
	DB       *sql.DB
	Registry *Registry
	Logger   *zap.Logger
	Metrics  *metrics.Set
}

// Work applies every event of the batch and completes the job in one
// transaction. If any event fails, nothing of the batch is kept: the job is
// completed after inserting one apply job per event, in a transaction of
// its own, so each event succeeds, retries or fails on its own.
func (w *ApplyBatchWorker) Work(ctx context.Context, job *river.Job[ApplyBatchArgs]) error {
	keys := append([]EventKey(nil), job.Args.Events...)
	sort.Slice(keys, func(i, j int) bool { return keys[i].less(keys[j]) })
	start := time.Now()
	type applied struct {
		ev      *Event
		outcome Outcome
	}
	var done []applied
	err := InTx(ctx, w.DB, func(tx *Tx) error {
		done = done[:0]
		for _, k := range keys {
			ev, outcome, err := Apply(ctx, tx, w.Registry, ApplyArgs{Namespace: k.Namespace, EventID: k.EventID})
			if err != nil {
				return err
			}
			done = append(done, applied{ev, outcome})
		}
		if _, err := river.JobCompleteTx[*riverdatabasesql.Driver](ctx, tx.Tx, job); err != nil {
			return fmt.Errorf("complete job %d: %w", job.ID, err)
		}
		return nil
	})
	if err == nil {
		for _, a := range done {
			w.Metrics.Applies.WithLabelValues(a.ev.Provider, a.ev.Type, string(a.outcome)).Inc()
		}
		if len(done) > 0 {
			w.Metrics.ApplySeconds.WithLabelValues(done[0].ev.Provider).Observe(time.Since(start).Seconds() / float64(len(done)))
		}
		return nil
	}
	w.Logger.Info("batch apply failed; applying its events one by one", zap.Int64("job_id", job.ID), zap.Int("events", len(keys)), zap.Error(err))
	split := make([]river.InsertManyParams, len(keys))
	for i, k := range keys {
		split[i] = river.InsertManyParams{Args: ApplyArgs{Namespace: k.Namespace, EventID: k.EventID}}
	}
	// Split even when the batch ran out of time: its context is done then,
	// and a batch that can never finish must not keep its events.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	serr := InTx(sctx, w.DB, func(tx *Tx) error {
		if err := w.Registry.insertMany(sctx, tx, split); err != nil {
			return err
		}
		_, err := river.JobCompleteTx[*riverdatabasesql.Driver](sctx, tx.Tx, job)
		return err
	})
	if serr != nil {
		return markUnavailable(fmt.Errorf("split batch job %d: %w", job.ID, serr))
	}
	return nil
}

// NextRetry retries a batch that could not even be split within seconds:
// that is a database outage or a crash, never a handler's failure.
func (w *ApplyBatchWorker) NextRetry(*river.Job[ApplyBatchArgs]) time.Time {
	return time.Now().Add(RetryDelay(1))
}

// Timeout bounds one batch apply.
func (w *ApplyBatchWorker) Timeout(*river.Job[ApplyBatchArgs]) time.Duration { return ApplyTimeout }
