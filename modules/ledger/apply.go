package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/metrics"
)

// ApplyArgs is the apply job: the ledger key, never the payload.
type ApplyArgs struct {
	Namespace string `json:"namespace"`
	EventID   string `json:"event_id"`
	// Force applies the event even when it is already settled.
	Force bool `json:"force,omitempty"`
}

// Kind names the job in River.
func (ApplyArgs) Kind() string { return "apply_event" }

// InsertOpts gives every apply job the same bounded retries.
func (ApplyArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: ApplyMaxAttempts}
}

// Apply job tuning. A killed worker's job is rescued after
// RescueStuckJobsAfter (River checks every 30 s), so every claimed event
// settles within two minutes of a restart.
const (
	ApplyMaxAttempts     = 25
	ApplyTimeout         = 20 * time.Second
	RescueStuckJobsAfter = 30 * time.Second
	maxRetryDelay        = 10 * time.Minute
)

// Outcome is what one apply did.
type Outcome string

// Apply outcomes.
const (
	OutcomeSettled Outcome = "settled"
	// OutcomeAlreadySettled: the row was settled before this job ran (a
	// rescued or duplicate job); nothing was applied.
	OutcomeAlreadySettled Outcome = "skipped"
	OutcomeFailed         Outcome = "failed"
)

// Apply locks the ledger row of args, runs its handlers and marks it
// settled, all inside tx. The caller commits tx together with River's job
// completion.
func Apply(ctx context.Context, tx *Tx, reg *Registry, args ApplyArgs) (*Event, Outcome, error) {
	row, err := tx.Ent.WebhookEvent.Query().
		Where(webhookevent.Namespace(args.Namespace), webhookevent.EventID(args.EventID)).
		ForUpdate().
		Only(ctx)
	if ent.IsNotFound(err) {
		return nil, OutcomeFailed, fmt.Errorf("apply %s/%s: %w", args.Namespace, args.EventID, ErrEventGone)
	}
	if err != nil {
		return nil, OutcomeFailed, fmt.Errorf("lock %s/%s: %w", args.Namespace, args.EventID, err)
	}
	ev := &Event{
		Namespace: row.Namespace,
		EventID:   row.EventID,
		Provider:  row.Provider,
		Source:    row.Source,
		Type:      row.EventType,
		Payload:   row.Payload,
		Replayed:  row.Replayed,
		Forced:    args.Force && row.Status == webhookevent.StatusSettled,
	}
	if row.OccurredAt != nil {
		ev.OccurredAt = *row.OccurredAt
	}
	if row.Status == webhookevent.StatusSettled && !args.Force {
		return ev, OutcomeAlreadySettled, nil
	}
	for _, h := range reg.Handlers(row.Provider, row.EventType) {
		if err := h(ctx, tx, ev); err != nil {
			return ev, OutcomeFailed, fmt.Errorf("apply %s %s/%s: %w", row.EventType, row.Namespace, row.EventID, err)
		}
	}
	err = tx.Ent.WebhookEvent.Update().
		Where(webhookevent.ID(row.ID)).
		SetStatus(webhookevent.StatusSettled).
		SetSettledAt(time.Now()).
		AddAttempts(1).
		ClearLastError().
		Exec(ctx)
	if err != nil {
		return ev, OutcomeFailed, fmt.Errorf("settle %s/%s: %w", row.Namespace, row.EventID, err)
	}
	return ev, OutcomeSettled, nil
}

// RecordFailure marks the ledger row failed with the reason, in a statement
// of its own after the apply transaction rolled back. A settled row is left
// alone unless force is set: a late duplicate run must not flip it.
func RecordFailure(ctx context.Context, db *sql.DB, args ApplyArgs, reason string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := db.ExecContext(ctx, `
		UPDATE webhook_event
		SET status = 'failed', attempts = attempts + 1, last_error = $3
		WHERE namespace = $1 AND event_id = $2 AND (status <> 'settled' OR $4)`,
		args.Namespace, args.EventID, truncate(reason, 4000), args.Force)
	if err != nil {
		return fmt.Errorf("record failure of %s/%s: %w", args.Namespace, args.EventID, err)
	}
	return nil
}

// ApplyWorker is River's worker for ApplyArgs.
type ApplyWorker struct {
	river.WorkerDefaults[ApplyArgs]
	DB *sql.DB
	// AsyncDB, when set, is a view of a pool whose sessions run with
	// synchronous_commit=off; applies run there and save a round trip.
	AsyncDB  *sql.DB
	Registry *Registry
	Logger   *zap.Logger
	Metrics  *metrics.Set
}

// Work applies the event and completes the job in the same transaction.
func (w *ApplyWorker) Work(ctx context.Context, job *river.Job[ApplyArgs]) error {
	start := time.Now()
	var (
		ev      *Event
		outcome Outcome
	)
	// The apply needs no synchronous commit: its effects, the ledger's
	// settle and the job's completion commit together, so a commit lost to
	// a database crash loses all three, and River runs the job again. Only
	// the claim's commit, which a 2xx promises, must be durable.
	db := w.AsyncDB
	if db == nil {
		db = w.DB
	}
	err := InTx(ctx, db, func(tx *Tx) error {
		if w.AsyncDB == nil {
			if _, err := tx.ExecContext(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
				return fmt.Errorf("apply %s/%s: %w", job.Args.Namespace, job.Args.EventID, err)
			}
		}
		var err error
		ev, outcome, err = Apply(ctx, tx, w.Registry, job.Args)
		if err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverdatabasesql.Driver](ctx, tx.Tx, job); err != nil {
			return fmt.Errorf("complete job %d: %w", job.ID, err)
		}
		return nil
	})
	provider, eventType := "unknown", "unknown"
	if ev != nil {
		provider, eventType = ev.Provider, ev.Type
	}
	if err != nil {
		outcome = OutcomeFailed
	}
	w.Metrics.Applies.WithLabelValues(provider, eventType, string(outcome)).Inc()
	w.Metrics.ApplySeconds.WithLabelValues(provider).Observe(time.Since(start).Seconds())
	if err == nil {
		return nil
	}
	log := w.Logger.With(zap.String("event_id", job.Args.EventID), zap.String("namespace", job.Args.Namespace),
		zap.Int64("job_id", job.ID), zap.Int("attempt", job.Attempt))
	if rerr := RecordFailure(ctx, w.DB, job.Args, err.Error()); rerr != nil {
		log.Error("apply failed and the failure could not be recorded", zap.Error(err), zap.NamedError("record_error", rerr))
	}
	if IsPermanent(err) {
		log.Error("apply failed permanently; not retrying", zap.Error(err))
		return river.JobCancel(err)
	}
	log.Warn("apply failed; River retries", zap.Error(err))
	return err
}

// NextRetry backs off exponentially from one second, capped at ten minutes,
// with jitter; River's default (attempt^4 s) waits weeks by the last try.
func (w *ApplyWorker) NextRetry(job *river.Job[ApplyArgs]) time.Time {
	return time.Now().Add(RetryDelay(job.Attempt))
}

// RetryDelay is the wait before retry number attempt (1-based).
func RetryDelay(attempt int) time.Duration {
	d := maxRetryDelay
	if attempt < 20 {
		d = min(time.Second<<max(attempt-1, 0), maxRetryDelay)
	}
	return d + rand.N(d/4+1)
}

// Timeout bounds one apply.
func (w *ApplyWorker) Timeout(*river.Job[ApplyArgs]) time.Duration { return ApplyTimeout }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
