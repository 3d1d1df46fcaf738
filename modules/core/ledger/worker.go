package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/hookledger/hookledger/modules/core/metrics"
)

// EventKey is a ledger key.
type EventKey struct {
	Namespace string `json:"namespace"`
	EventID   string `json:"event_id"`
}

// compare orders ledger keys. Transactions that lock ledger rows in this
// order cannot deadlock on them.
func (k EventKey) compare(o EventKey) int {
	return cmp.Or(strings.Compare(k.Namespace, o.Namespace), strings.Compare(k.EventID, o.EventID))
}

// ApplyBatchArgs applies the events one group commit claimed, in one
// transaction: a handful of round trips for the batch instead of five per
// event. It carries ledger keys only.
type ApplyBatchArgs struct {
	Events []EventKey `json:"events"`
}

// Kind names the job in River.
func (ApplyBatchArgs) Kind() string { return "apply_batch" }

// InsertOpts gives batch jobs the apply job's attempt budget.
func (ApplyBatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: ApplyMaxAttempts}
}

// Applier is the apply loop behind both apply job kinds: an apply_event job
// is a batch of one. It applies every event of a job and completes the job
// in one transaction. Any failure rolls the whole job back and then takes
// one path, whatever its cause:
//
//   - a handler's failure (an error, a panic, a timeout while the database
//     answers) of a job of one event is recorded on the event's row and
//     returned to River as the job's error: River keeps it in the job's
//     errors, counts the attempt and schedules the retry (NextRetry), or
//     discards the job when its attempts (ApplyMaxAttempts, about
//     RetryHorizon of backoff) are spent. A permanent failure cancels the
//     job at once. A batch that fails is split into one job per event, in
//     a transaction with its completion, and records nothing: each event's
//     own job runs at once, and the failing one fails there, with errors
//     of its own;
//   - an outage of hookledger's own database snoozes the job for a few
//     seconds and records nothing: it is not an attempt;
//   - a shutdown hands the job back to River untouched.
type Applier struct {
	DB       *sql.DB
	Registry *Registry
	Logger   *zap.Logger
	Metrics  *metrics.Set
	// Timeout overrides ApplyTimeout when positive.
	Timeout time.Duration
	// Linger is how old a claim's job must be before it takes its batch
	// (linger); 0 applies at once.
	Linger     time.Duration
	lingerGate func(ctx context.Context)
	// Payloads, when set, are the payloads this process's claims keep for
	// their apply.
	Payloads *Payloads
	// Sealer opens sealed payloads (PAYLOAD_KEYS); nil when off.
	Sealer *Sealer

	feedLog        atomic.Pointer[zap.Logger]
	unhandled      sync.Map // provider\x00type of unhandled types already logged
	unhandledTypes atomic.Int32
}

func (a *Applier) timeout() time.Duration {
	if a.Timeout > 0 {
		return a.Timeout
	}
	return ApplyTimeout
}

// feed is the per-event line logger: "<-- type id applied in 4ms". The
// process's logger shows it as bare lines on a console and at debug in
// JSON logs (see app.FeedLogger).
func (a *Applier) feed() *zap.Logger {
	if l := a.feedLog.Load(); l != nil {
		return l
	}
	l := a.Logger.Named("feed")
	a.feedLog.Store(l)
	return l
}

// feedf writes one feed line, formatting it only when the feed shows
// it: in JSON logs at info, the usual production setting, it does not,
// and formatting a line per event cost the apply for nothing.
func (a *Applier) feedf(level zapcore.Level, format string, args ...any) {
	if ce := a.feed().Check(level, ""); ce != nil {
		ce.Message = fmt.Sprintf(format, args...)
		ce.Write()
	}
}

// applied is one event the loop got through.
type applied struct {
	ev      *Event
	outcome Outcome
	took    time.Duration
}

// failure is the event, if any, that failed a job, and how.
type failure struct {
	attempt Attempt // zero Key: the failure was outside any one event
	ev      *Event  // the event as far as it was read; nil when not
	err     error
	kind    failureKind
}

// inTx begins an apply transaction. Its Tx inserts jobs, the handlers' and
// a split batch's, through the River client working the job, which River
// puts in the job's context; a job worked outside River (Work called
// directly) has none.
func (a *Applier) inTx(ctx context.Context, fn func(*Tx) error) error {
	var jobs JobInserter
	if client, err := river.ClientFromContextSafely[*sql.Tx](ctx); err == nil {
		jobs = client
	}
	return InTxWithJobs(ctx, a.DB, jobs, fn)
}

// linger waits, before a claim's job takes its batch, until the job is
// Linger old. Under load a claim commits every few milliseconds, each
// with a job, and idle workers would each take one at once: many small
// apply transactions, each paying River's fetch and completion and the
// apply's own statements, on the cores the claims need. A job that
// lingers absorbs the claims' jobs that arrive meanwhile (absorb), so
// the apply runs as a few large transactions. An event settles up to
// Linger later; a job that waited longer than Linger for a worker (a
// backlog) does not wait at all. Nothing is locked while it waits, and
// a shutdown ends the wait: the apply then finds its context ended and
// hands the job back.
func (a *Applier) linger(ctx context.Context, created time.Time) {
	if a.Linger <= 0 {
		return
	}
	if a.lingerGate != nil {
		a.lingerGate(ctx)
		return
	}
	// At most Linger, whatever the clocks of the claim's database and this
	// process say of the job's age.
	d := min(a.Linger-time.Since(created), a.Linger)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// completer completes the running job inside a transaction, with the
// jobs it had absorbed that still wait, and returns their events.
type completer func(ctx context.Context, tx *Tx) ([]EventKey, error)

// run applies own, the job's events, and reports the job's result to
// River. A job that absorbs takes the claims' jobs waiting beside it into
// its transaction, and their events with its own (absorb.go).
func run[T river.JobArgs](ctx context.Context, a *Applier, job *river.Job[T], own []EventKey, force, absorbs bool) error {
	own = append([]EventKey(nil), own...)
	slices.SortFunc(own, EventKey.compare)
	if absorbs && len(own) < absorbEvents {
		// A job that fills its transaction alone has nothing to wait for.
		a.linger(ctx, job.CreatedAt)
	}
	var (
		done     []applied
		fail     *failure
		absorbed []absorbedJob
	)
	err := a.inTx(ctx, func(tx *Tx) error {
		done, fail, absorbed = done[:0], nil, nil
		start := time.Now()
		keys := own
		err := planApply(ctx, tx)
		if budget := absorbEvents - len(own); err == nil && absorbs && budget > 0 {
			if absorbed, err = absorb(ctx, tx, absorbSQL, job.Queue, job.ID, maxAbsorbedJobs, budget); err == nil {
				keys = mergeKeys(own, events(absorbed))
			}
		}
		// The job completes first, before the apply takes any lock another
		// apply may wait for: an apply that absorbs can be left holding the
		// lock of a job River fetched a moment before (PostgreSQL keeps the
		// lock of a row that SKIP LOCKED took and its recheck then dropped),
		// and the job's own completion waits for that apply to end. It must
		// then hold nothing that apply needs.
		if err == nil {
			if err = completeRunning(ctx, tx, job.JobRow); err != nil {
				err = &dbError{fmt.Errorf("complete job %d: %w", job.ID, err)}
			}
		}
		var locked map[EventKey]*lockedRow
		if err == nil {
			locked, err = lockForApply(ctx, tx, a.Registry, keys, force, a.Payloads, a.Sealer)
		}
		if err == nil {
			err = unplanApply(ctx, tx)
		}
		if err != nil {
			fail = &failure{attempt: Attempt{Seen: -1}, err: err, kind: classify(ctx, a.DB, tx, err)}
			return err
		}
		lockTook := time.Since(start) / time.Duration(len(keys))
		last := failure{attempt: Attempt{Seen: -1}}
		for _, k := range keys {
			start := time.Now()
			ev, outcome, seen, err := applyLocked(ctx, tx, a.Registry, k, locked[k])
			if err != nil {
				fail = &failure{attempt: Attempt{Key: k, Seen: seen}, ev: ev, err: err, kind: classify(ctx, a.DB, tx, err)}
				return err
			}
			done = append(done, applied{ev, outcome, lockTook + time.Since(start)})
			last = failure{attempt: Attempt{Key: k, Seen: seen}, ev: ev}
		}
		// The handlers' staged writes, for the whole batch at once. Their
		// failure is the event's in a job of one; a batch is split without
		// a record, and the event's own job finds which one it was.
		start = time.Now()
		if err := flushStaged(ctx, tx); err != nil {
			if len(keys) > 1 {
				last = failure{attempt: Attempt{Seen: -1}}
			}
			last.err, last.kind = err, classify(ctx, a.DB, tx, err)
			fail = &last
			return err
		}
		if len(done) > 0 {
			flushTook := time.Since(start) / time.Duration(len(done))
			for i := range done {
				done[i].took += flushTook
			}
		}
		return nil
	})
	if err == nil {
		for _, d := range done {
			a.observe(d, job.ID)
		}
		return nil
	}
	if fail == nil {
		// Begin or commit: the ledger's own statements.
		fail = &failure{attempt: Attempt{Seen: -1}, err: err, kind: classify(ctx, a.DB, nil, &dbError{err})}
	}
	// The absorbed jobs were rolled back with the apply and wait again.
	// The time of a transaction that held other jobs' events is no one
	// event's: running out of it records nothing, and each event then runs
	// in a job of its own, within its own time.
	if len(absorbed) > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && fail.kind == failedHandler {
		fail.attempt, fail.ev = Attempt{Seen: -1}, nil
	}
	// A failure goes the way of a batch's, over the job's events and those
	// of the absorbed jobs that the split takes back (retake) while they
	// still wait.
	again := retake(absorbed, own, fail.attempt.Key)
	complete := func(ctx context.Context, tx *Tx) ([]EventKey, error) {
		if err := completeRunning(ctx, tx, job.JobRow); err != nil {
			return nil, err
		}
		if len(again) == 0 {
			return nil, nil
		}
		jobs, err := absorb(ctx, tx, reabsorbSQL, again)
		return events(jobs), err
	}
	return a.failed(ctx, job.JobRow, complete, own, len(again) > 0, force, fail)
}

// failed takes the one failure path.
// keys are the job's own events; retook says the split also takes back
// absorbed jobs (complete returns their events), so it splits even a job of
// one event.
func (a *Applier) failed(ctx context.Context, job *rivertype.JobRow, complete completer, keys []EventKey, retook bool, force bool, f *failure) error {
	log := a.Logger.With(zap.Int64("job_id", job.ID), zap.Int("events", len(keys)))
	if f.attempt.Key != (EventKey{}) {
		log = log.With(zap.String("namespace", f.attempt.Key.Namespace), zap.String("event_id", f.attempt.Key.EventID))
	}
	switch f.kind {
	case failedStopping:
		log.Info("apply interrupted by shutdown; River hands the job back", zap.Error(f.err))
		// River tells a shutdown from a failure by context.Canceled in the
		// chain, whatever the handler wrapped.
		return fmt.Errorf("%w: %v", context.Canceled, f.err)
	case failedOutage:
		if isContention(f.err) {
			log.Info("apply gave way to a concurrent transaction (deadlock, serialization or lock wait); retrying soon, not counted as an attempt", zap.Error(f.err))
		} else {
			log.Warn("database unavailable during apply; retrying soon, not counted as an attempt", zap.Error(f.err))
		}
		return river.JobSnooze(outageDelay)
	}
	var p *PanicError
	if errors.As(f.err, &p) {
		log = log.With(zap.String("stack", p.Stack))
	}
	provider, eventType := "unknown", "other"
	if f.ev != nil {
		provider, eventType = f.ev.Provider, a.Registry.LabelType(f.ev.Provider, f.ev.Type)
		log = log.With(zap.String("event_type", f.ev.Type))
	}
	a.Metrics.Applies.WithLabelValues(provider, eventType, string(OutcomeFailed)).Inc()
	if f.attempt.Key != (EventKey{}) {
		a.feedf(zapcore.InfoLevel, "<-- %s failed: %v", f.attempt.Key.EventID, f.err)
	}
	if len(keys) > 1 || retook {
		return a.split(ctx, complete, keys, force, f, log)
	}
	if errors.Is(f.err, ErrEventGone) {
		log.Warn("the event's ledger row is gone (pruned or deleted); nothing to apply", zap.Error(f.err))
		return river.JobCancel(f.err)
	}
	if f.attempt.Key == (EventKey{}) {
		// A one-event job whose own statements failed: record it against
		// its event, which it never reached.
		f.attempt = Attempt{Key: keys[0], Seen: -1}
	}
	last := f.kind == failedPermanently || job.Attempt >= job.MaxAttempts
	jobErr := f.err
	if last && f.kind != failedPermanently {
		jobErr = fmt.Errorf("gave up after %d attempts: %w", job.Attempt, f.err)
	}
	ok, err := recordFailure(ctx, a.DB, f.attempt, Failure{JobID: job.ID, Handler: handlerOf(f.err), Error: jobErr.Error()})
	if err != nil {
		log.Warn("apply failed and the failure could not be recorded; retrying soon", zap.Error(f.err), zap.NamedError("record_error", err))
		return river.JobSnooze(outageDelay)
	}
	if !ok {
		// Settled meanwhile (the commit went through, or another job
		// applied it), or discarded: the next run finds it so.
		log.Info("apply reported a failure but the event is settled or discarded; nothing recorded", zap.Error(f.err))
		return river.JobSnooze(0)
	}
	switch {
	case f.kind == failedPermanently:
		log.Error("apply failed permanently; not retrying", zap.Error(f.err))
		return river.JobCancel(f.err)
	case last:
		log.Error("apply failed on its last attempt; River discards the job", zap.Error(f.err), zap.Int("attempt", job.Attempt))
	default:
		log.Warn("apply failed; River retries it", zap.Error(f.err), zap.Int("attempt", job.Attempt), zap.Int("max_attempts", job.MaxAttempts))
	}
	// River records the error's text in the job's errors: the handler's
	// name and reason, as on the ledger row.
	return jobErr
}

// split replaces a failed batch job with one job per event, in one
// transaction with the batch job's completion. Nothing is recorded: every
// event's own job runs at once, and the one that fails fails there, with
// its error in its own job.
func (a *Applier) split(ctx context.Context, complete completer, keys []EventKey, force bool, f *failure, log *zap.Logger) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := a.inTx(ctx, func(tx *Tx) error {
		more, err := complete(ctx, tx)
		if err != nil {
			return err
		}
		keys := mergeKeys(keys, more)
		params := make([]river.InsertManyParams, 0, len(keys))
		for _, k := range keys {
			params = append(params, river.InsertManyParams{Args: ApplyArgs{Namespace: k.Namespace, EventID: k.EventID, Force: force}})
		}
		return tx.InsertJobs(ctx, params)
	})
	if err != nil {
		log.Warn("batch apply failed and could not be split; retrying soon", zap.Error(f.err), zap.NamedError("split_error", err))
		return river.JobSnooze(outageDelay)
	}
	log.Info("batch apply failed; split into one job per event", zap.Error(f.err), zap.String("failure", f.kind.String()))
	return nil
}

// observe counts and logs one applied event.
func (a *Applier) observe(d applied, jobID int64) {
	if d.ev == nil {
		return
	}
	a.Metrics.Applies.WithLabelValues(d.ev.Provider, a.Registry.LabelType(d.ev.Provider, d.ev.Type), string(d.outcome)).Inc()
	a.Metrics.ApplySeconds.WithLabelValues(d.ev.Provider).Observe(d.took.Seconds())
	switch d.outcome {
	case OutcomeSettled:
		forced := ""
		if d.ev.Forced {
			forced = " (forced)"
		}
		a.feedf(zapcore.InfoLevel, "<-- %s %s applied%s in %s", d.ev.Type, d.ev.EventID, forced, d.took.Round(time.Millisecond/10))
	case OutcomeUnhandled:
		a.feedf(zapcore.InfoLevel, "<-- %s %s settled: no handler for this type", d.ev.Type, d.ev.EventID)
		k := d.ev.Provider + "\x00" + d.ev.Type
		if _, seen := a.unhandled.Load(k); !seen && a.unhandledTypes.Load() < maxUnhandledLogged {
			if _, seen := a.unhandled.LoadOrStore(k, true); !seen {
				a.unhandledTypes.Add(1)
				a.Logger.Warn("no handler for this event type: settled without effect (logged once per type)",
					zap.String("provider", d.ev.Provider), zap.String("event_type", d.ev.Type), zap.String("event_id", d.ev.EventID), zap.Int64("job_id", jobID))
			}
		}
	default:
		a.feedf(zapcore.DebugLevel, "<-- %s %s already settled: nothing applied", d.ev.Type, d.ev.EventID)
	}
}

// maxUnhandledLogged bounds the memory that logging each unhandled type
// once may take: types come from senders.
const maxUnhandledLogged = 1000

// ApplyWorker is River's worker for ApplyArgs.
type ApplyWorker struct {
	river.WorkerDefaults[ApplyArgs]
	*Applier
}

// Work applies the event and completes the job in the same transaction.
func (w *ApplyWorker) Work(ctx context.Context, job *river.Job[ApplyArgs]) error {
	return run(ctx, w.Applier, job, []EventKey{job.Args.key()}, job.Args.Force, job.Args.Fresh && mayAbsorb(job.JobRow))
}

// NextRetry is the backoff after the job's attempt failed (RetryDelay).
func (w *ApplyWorker) NextRetry(job *river.Job[ApplyArgs]) time.Time {
	return time.Now().Add(RetryDelay(job.Attempt))
}

// Timeout bounds one apply.
func (w *ApplyWorker) Timeout(*river.Job[ApplyArgs]) time.Duration { return w.timeout() }

// ApplyBatchWorker is River's worker for ApplyBatchArgs.
type ApplyBatchWorker struct {
	river.WorkerDefaults[ApplyBatchArgs]
	*Applier
}

// Work applies every event of the batch and completes the job in one
// transaction.
func (w *ApplyBatchWorker) Work(ctx context.Context, job *river.Job[ApplyBatchArgs]) error {
	return run(ctx, w.Applier, job, job.Args.Events, false, mayAbsorb(job.JobRow))
}

// NextRetry is the backoff after the job's attempt failed (RetryDelay).
func (w *ApplyBatchWorker) NextRetry(job *river.Job[ApplyBatchArgs]) time.Time {
	return time.Now().Add(RetryDelay(job.Attempt))
}

// Timeout bounds one batch apply.
func (w *ApplyBatchWorker) Timeout(*river.Job[ApplyBatchArgs]) time.Duration { return w.timeout() }
