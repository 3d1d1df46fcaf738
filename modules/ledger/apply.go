package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivertype"
	"go.uber.org/zap"

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

// Apply settles the ledger row of args and runs its handlers, all inside
// tx; the caller commits tx together with River's job completion. The row
// is marked settled first, in the statement that locks it: the transaction
// makes that invisible until the handlers succeed, and a failure rolls it
// back with them. A row already settled is left alone unless args.Force.
func Apply(ctx context.Context, tx *Tx, reg *Registry, args ApplyArgs) (*Event, Outcome, error) {
	ev := &Event{Namespace: args.Namespace, EventID: args.EventID}
	var (
		payload    []byte
		occurredAt sql.NullTime
		wasStatus  string
	)
	err := tx.QueryRowContext(ctx, `
		UPDATE webhook_event e
		SET status = 'settled', settled_at = now(), attempts = e.attempts + 1, last_error = NULL
		FROM (SELECT id, status FROM webhook_event WHERE namespace = $1 AND event_id = $2 FOR UPDATE) old
		WHERE e.id = old.id AND (old.status <> 'settled' OR $3)
		RETURNING e.provider, e.source, e.event_type, e.payload, e.occurred_at, e.replayed, old.status`,
		args.Namespace, args.EventID, args.Force,
	).Scan(&ev.Provider, &ev.Source, &ev.Type, &payload, &occurredAt, &ev.Replayed, &wasStatus)
	if errors.Is(err, sql.ErrNoRows) {
		return settledOrGone(ctx, tx, ev)
	}
	if err != nil {
		return nil, OutcomeFailed, fmt.Errorf("lock %s/%s: %w", args.Namespace, args.EventID, err)
	}
	ev.Payload = payload
	ev.OccurredAt = occurredAt.Time
	ev.Forced = args.Force && wasStatus == "settled"
	for _, h := range reg.Handlers(ev.Provider, ev.Type) {
		if err := h(ctx, tx, ev); err != nil {
			return ev, OutcomeFailed, fmt.Errorf("apply %s %s/%s: %w", ev.Type, ev.Namespace, ev.EventID, err)
		}
	}
	return ev, OutcomeSettled, nil
}

// settledOrGone tells a row that was already settled from one that no
// longer exists.
func settledOrGone(ctx context.Context, tx *Tx, ev *Event) (*Event, Outcome, error) {
	err := tx.QueryRowContext(ctx, `SELECT provider, event_type FROM webhook_event WHERE namespace = $1 AND event_id = $2`,
		ev.Namespace, ev.EventID).Scan(&ev.Provider, &ev.Type)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, OutcomeFailed, fmt.Errorf("apply %s/%s: %w", ev.Namespace, ev.EventID, ErrEventGone)
	}
	if err != nil {
		return nil, OutcomeFailed, fmt.Errorf("read %s/%s: %w", ev.Namespace, ev.EventID, err)
	}
	return ev, OutcomeAlreadySettled, nil
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
	DB       *sql.DB
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
	// The apply commits synchronously like the claim. An asynchronous
	// commit lost in a database crash would lose the settle, while River's
	// completer, which completes the job again on its own connection once
	// Work returns, would keep the job completed: an event never applied.
	err := InTx(ctx, w.DB, func(tx *Tx) error {
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
	err = markUnavailable(err)
	log.Warn("apply failed; River retries", zap.Error(err))
	return err
}

// markUnavailable prefixes a database failure so that River's record of
// attempts tells it from a handler's failure (see handlerFailures).
func markUnavailable(err error) error {
	if IsUnavailable(err) {
		return fmt.Errorf("%s%w", unavailablePrefix, err)
	}
	return err
}

// unavailablePrefix marks a failure of the database rather than of the
// handler in River's record of attempts.
const unavailablePrefix = "database unavailable: "

// handlerFailures counts the earlier attempts the handler itself failed:
// not database outages, and not runs lost to a crash that River's rescuer
// picked up.
func handlerFailures(errs []rivertype.AttemptError) int {
	n := 0
	for _, e := range errs {
		if !strings.HasPrefix(e.Error, unavailablePrefix) && !strings.HasPrefix(e.Error, "Stuck job rescued") {
			n++
		}
	}
	return n
}

// NextRetry backs off exponentially from one second, capped at ten minutes,
// with jitter; River's default (attempt^4 s) waits weeks by the last try.
// Only the handler's own failures count: attempts lost to a crash or a
// database outage retry within seconds, so every event settles soon after
// the process or the database is back.
func (w *ApplyWorker) NextRetry(job *river.Job[ApplyArgs]) time.Time {
	return time.Now().Add(RetryDelay(handlerFailures(job.Errors) + 1))
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
