package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/hookledger/hookledger/modules/core/metrics"
)

// ApplyWorker is River's worker for ApplyArgs.
type ApplyWorker struct {
	river.WorkerDefaults[ApplyArgs]
	*Applier
}

// Work applies the event and completes the job in the same transaction.
func (w *ApplyWorker) Work(ctx context.Context, job *river.Job[ApplyArgs]) error {
	return w.run(ctx, job.JobRow, []EventKey{job.Args.key()}, job.Args.Force, job.Args.Fresh && mayAbsorb(job.JobRow))
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
	return w.run(ctx, job.JobRow, job.Args.Events, false, mayAbsorb(job.JobRow))
}

// NextRetry is the backoff after the job's attempt failed (RetryDelay).
func (w *ApplyBatchWorker) NextRetry(job *river.Job[ApplyBatchArgs]) time.Time {
	return time.Now().Add(RetryDelay(job.Attempt))
}

// Timeout bounds one batch apply.
func (w *ApplyBatchWorker) Timeout(*river.Job[ApplyBatchArgs]) time.Duration { return w.timeout() }

// Applier is the apply loop behind both apply job kinds: an apply_event job
// is a batch of one. It applies every event of a job and completes the job
// in one transaction, in ordered steps (run), and then decides what the
// job comes to in one place (report): any failure rolls the whole job back
// and takes one path, whatever its cause.
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

// run applies a job's own events, with those of the claims' jobs it
// absorbs when absorbs (absorb.go), and reports the job's result to River:
// the steps of an applyRun in one transaction, then report, which decides
// what the run comes to.
func (a *Applier) run(ctx context.Context, job *rivertype.JobRow, own []EventKey, force, absorbs bool) error {
	r := newApplyRun(a, job, own, force, absorbs)
	ctx, err := r.prepare(ctx)
	if err != nil {
		return a.report(ctx, r, &failure{attempt: r.at, ev: r.ev, err: err, kind: classify(ctx, a.DB, nil, err)})
	}
	if absorbs && len(r.own) < absorbEvents {
		// A job that fills its transaction alone has nothing to wait for.
		a.linger(ctx, job.CreatedAt)
	}
	err = a.inTx(ctx, func(tx *Tx) error {
		err := r.apply(ctx, tx)
		if err != nil {
			// Classified while the transaction is open: classify asks it
			// whether it still works.
			r.fail = &failure{attempt: r.at, ev: r.ev, err: err, kind: classify(ctx, a.DB, tx, err)}
		}
		return err
	})
	return a.report(ctx, r, r.failure(ctx, err))
}

// applyRun is one run of the apply: its events, and what each of its steps
// found, for the steps after it and for report.
type applyRun struct {
	a       *Applier
	job     *rivertype.JobRow // nil in Apply, which has no job
	own     []EventKey        // the job's own events, in key order
	force   bool
	absorbs bool

	start    time.Time
	keys     []EventKey // own and the absorbed jobs' events, in key order
	absorbed []absorbedJob
	kept     map[EventKey][]byte // payloads this process kept for keys
	locked   map[EventKey]*lockedRow
	done     []applied
	// prepared is the job's own event that prepare prepared; zero when none.
	prepared EventKey
	// at is the event the apply is at, and ev the event as far as it was
	// read: a failure is theirs. No event's (a zero Key, Seen -1) before the
	// handlers, nor in a batch's flush.
	at Attempt
	ev *Event
	// fail is the failure a step met, classified in the transaction.
	fail *failure
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

func newApplyRun(a *Applier, job *rivertype.JobRow, own []EventKey, force, absorbs bool) *applyRun {
	own = append([]EventKey(nil), own...)
	slices.SortFunc(own, EventKey.compare)
	return &applyRun{a: a, job: job, own: own, force: force, absorbs: absorbs, at: Attempt{Seen: -1}}
}

// apply runs the apply's steps in tx, in order, and stops at the first
// that fails. The job completes before the apply takes any lock another
// apply may wait for: an apply that absorbs can be left holding the lock
// of a job River fetched a moment before (PostgreSQL keeps the lock of a
// row that SKIP LOCKED took and its recheck then dropped), and the job's
// own completion waits for that apply to end. It must then hold nothing
// that apply needs.
func (r *applyRun) apply(ctx context.Context, tx *Tx) error {
	for _, step := range []func(context.Context, *Tx) error{
		r.take,     // the events: the job's, and the absorbed jobs'
		r.complete, // River's job, completed in the transaction
		r.lock,     // the ledger rows, locked and marked settled
		r.open,     // their payloads
		r.handle,   // each event's handlers
		r.flush,    // the writes the handlers staged
	} {
		if err := step(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

// take opens the apply (planApply) and gathers its events: the job's own
// and, when it absorbs, those of the claims' jobs waiting beside it, up to
// absorbEvents in all.
func (r *applyRun) take(ctx context.Context, tx *Tx) error {
	r.start, r.keys = time.Now(), r.own
	if err := planApply(ctx, tx); err != nil {
		return err
	}
	budget := absorbEvents - len(r.own)
	if !r.absorbs || budget <= 0 {
		return r.setAside(ctx, tx)
	}
	absorbed, err := absorb(ctx, tx, absorbSQL, r.job.Queue, r.job.ID, maxAbsorbedJobs, budget)
	if err != nil {
		return err
	}
	r.absorbed, r.keys = absorbed, mergeKeys(r.own, events(absorbed))
	return r.setAside(ctx, tx)
}

// complete completes River's job in the transaction, so that it completes
// exactly when the apply commits.
func (r *applyRun) complete(ctx context.Context, tx *Tx) error {
	if r.job == nil {
		return nil
	}
	if err := completeRunning(ctx, tx, r.job); err != nil {
		return &dbError{fmt.Errorf("complete job %d: %w", r.job.ID, err)}
	}
	return nil
}

// lock locks the events' ledger rows and marks them settled
// (lockForApply), without reading back the payloads this process kept for
// them, and then gives the handlers the transaction's own planner
// settings.
func (r *applyRun) lock(ctx context.Context, tx *Tx) (err error) {
	if !r.force {
		r.kept = r.a.Payloads.takeAll(r.keys)
	}
	if r.locked, err = lockForApply(ctx, tx, r.a.Registry, r.keys, r.force, r.kept); err != nil {
		return err
	}
	return unplanApply(ctx, tx, len(r.keys))
}

// open gives each locked row its payload: the one this process kept, or
// the stored one, opened when it is sealed (PAYLOAD_KEYS).
func (r *applyRun) open(context.Context, *Tx) error {
	for k, row := range r.locked {
		if row.ev.Payload == nil {
			row.ev.Payload = r.kept[k]
			continue
		}
		payload, err := r.a.Sealer.Open(k, row.ev.Payload)
		if err != nil {
			// A sealed payload no key opens (PAYLOAD_KEYS changed under
			// it) fails the event, with the reason, until a key is back.
			return err
		}
		row.ev.Payload = payload
	}
	return nil
}

// handle runs each event's handlers, in key order; an event whose row was
// settled already, or has no handler, has nothing to run.
func (r *applyRun) handle(ctx context.Context, tx *Tx) error {
	lockTook := time.Since(r.start) / time.Duration(max(len(r.keys), 1))
	for _, k := range r.keys {
		start := time.Now()
		ev, outcome, seen, err := applyLocked(ctx, tx, r.a.Registry, k, r.locked[k])
		r.at, r.ev = Attempt{Key: k, Seen: seen}, ev
		if err != nil {
			return err
		}
		r.done = append(r.done, applied{ev, outcome, lockTook + time.Since(start)})
	}
	return nil
}

// flush makes the handlers' staged writes, for the whole batch at once.
// Their failure is the event's in a job of one; a batch is split without a
// record, and the event's own job finds which one it was.
func (r *applyRun) flush(ctx context.Context, tx *Tx) error {
	if len(r.keys) > 1 {
		r.at, r.ev = Attempt{Seen: -1}, nil
	}
	start := time.Now()
	if err := flushStaged(ctx, tx); err != nil {
		return err
	}
	if len(r.done) > 0 {
		took := time.Since(start) / time.Duration(len(r.done))
		for i := range r.done {
			r.done[i].took += took
		}
	}
	return nil
}

// failure is what ended the run, given err, the transaction's: nil when it
// committed; else the failure a step met, or the begin's or the commit's.
func (r *applyRun) failure(ctx context.Context, err error) *failure {
	if err == nil {
		return nil
	}
	f := r.fail
	if f == nil {
		// Begin or commit: the ledger's own statements.
		f = &failure{attempt: Attempt{Seen: -1}, err: err, kind: classify(ctx, r.a.DB, nil, &dbError{err})}
	}
	// The absorbed jobs were rolled back with the apply and wait again.
	// The time of a transaction that held other jobs' events is no one
	// event's: running out of it records nothing, and each event then runs
	// in a job of its own, within its own time.
	if len(r.absorbed) > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && f.kind == failedHandler {
		f.attempt, f.ev = Attempt{Seen: -1}, nil
	}
	return f
}

// report decides what a run comes to, in one place: River's outcome for
// the job, and what the ledger row records. A run that committed completes
// the job (in its transaction) and counts its events. A failure, by kind:
//
//   - a shutdown hands the job back to River untouched;
//   - an outage of hookledger's own database, or contention, snoozes the
//     job for a few seconds and records nothing: it is not an attempt;
//   - a batch, or a job that takes back the absorbed jobs its failure
//     concerns (retake), is split into one job per event, in a transaction
//     with its completion, and records nothing: each event's own job runs
//     at once, and the failing one fails there, with errors of its own;
//   - an event whose row is gone cancels the job;
//   - any other (a handler's error, a panic, a timeout while the database
//     answers) is recorded on the event's row (RecordFailure) and returned
//     as the job's error: River keeps it in the job's errors, counts the
//     attempt and schedules the retry (NextRetry), or discards the job when
//     its attempts (ApplyMaxAttempts, about RetryHorizon of backoff) are
//     spent. A permanent failure cancels the job at once. When the record
//     cannot be made, or the row was settled or discarded meanwhile, the
//     job is snoozed instead.
func (a *Applier) report(ctx context.Context, r *applyRun, f *failure) error {
	if f == nil {
		for _, d := range r.done {
			a.observe(d, r.job.ID)
		}
		return nil
	}
	log := a.Logger.With(zap.Int64("job_id", r.job.ID), zap.Int("events", len(r.own)))
	if f.attempt.Key != (EventKey{}) {
		log = log.With(zap.String("namespace", f.attempt.Key.Namespace), zap.String("event_id", f.attempt.Key.EventID))
	}
	switch {
	case f.kind == failedStopping:
		log.Info("apply interrupted by shutdown; River hands the job back", zap.Error(f.err))
		// River tells a shutdown from a failure by context.Canceled in the
		// chain, whatever the handler wrapped.
		return fmt.Errorf("%w: %v", context.Canceled, f.err)
	case f.kind == failedOutage && isContention(f.err) && (len(r.own) > 1 || len(r.absorbed) > 0):
		// A batch that met a lock (ApplyLockTimeout) or a deadlock: the
		// lock is one event's business, so each event goes on in a job
		// of its own, and only the one that writes the locked row waits.
		if err := a.split(ctx, r, ids(r.absorbed)); err != nil {
			log.Warn("batch apply gave way to a concurrent transaction and could not be split; retrying soon", zap.Error(f.err), zap.NamedError("split_error", err))
			return river.JobSnooze(outageDelay)
		}
		log.Info("batch apply gave way to a concurrent transaction (deadlock, serialization or lock wait); split into one job per event", zap.Error(f.err))
		return nil
	case f.kind == failedOutage && isContention(f.err):
		d := contentionDelay(r.job)
		log.Info("apply gave way to a concurrent transaction (deadlock, serialization or lock wait); retrying later, not counted as an attempt",
			zap.Error(f.err), zap.Duration("retry_in", d))
		return river.JobSnooze(d)
	case f.kind == failedOutage:
		log.Warn("database unavailable during apply; retrying soon, not counted as an attempt", zap.Error(f.err))
		return river.JobSnooze(outageDelay)
	}
	log = a.countFailure(f, log)
	// A failure goes the way of a batch's, over the job's events and those
	// of the absorbed jobs that the split takes back while they still wait.
	again := retake(r.absorbed, r.own, f.attempt.Key)
	switch {
	case len(r.own) > 1 || len(again) > 0:
		if err := a.split(ctx, r, again); err != nil {
			log.Warn("batch apply failed and could not be split; retrying soon", zap.Error(f.err), zap.NamedError("split_error", err))
			return river.JobSnooze(outageDelay)
		}
		log.Info("batch apply failed; split into one job per event", zap.Error(f.err), zap.String("failure", f.kind.String()))
		return nil
	case errors.Is(f.err, ErrEventGone):
		log.Warn("the event's ledger row is gone (pruned or deleted); nothing to apply", zap.Error(f.err))
		return river.JobCancel(f.err)
	}
	at := f.attempt
	if at.Key == (EventKey{}) {
		// A job of one event whose own statements failed: recorded
		// against its event, which it never reached.
		at = Attempt{Key: r.own[0], Seen: -1}
	}
	last := f.kind == failedPermanently || r.job.Attempt >= r.job.MaxAttempts
	jobErr := f.err
	if last && f.kind != failedPermanently {
		jobErr = fmt.Errorf("gave up after %d attempts: %w", r.job.Attempt, f.err)
	}
	recorded, err := recordFailure(ctx, a.DB, at, Failure{JobID: r.job.ID, Handler: handlerOf(f.err), Error: jobErr.Error()})
	switch {
	case err != nil:
		log.Warn("apply failed and the failure could not be recorded; retrying soon", zap.Error(f.err), zap.NamedError("record_error", err))
		return river.JobSnooze(outageDelay)
	case !recorded && a.discarded(ctx, at.Key):
		// Discarded meanwhile: no run of this job will apply it (the
		// lifecycle table), so it ends here rather than run again.
		log.Info("apply reported a failure but the event was discarded; the job is cancelled", zap.Error(f.err))
		return river.JobCancel(fmt.Errorf("%w: %v", errDiscardedMeanwhile, f.err))
	case !recorded:
		// Settled meanwhile (the commit went through, or another job
		// applied it): the next run finds it so and completes.
		log.Info("apply reported a failure but the event is settled; nothing recorded", zap.Error(f.err))
		return river.JobSnooze(0)
	case f.kind == failedPermanently:
		log.Error("apply failed permanently; not retrying", zap.Error(f.err))
		return river.JobCancel(f.err)
	case last:
		log.Error("apply failed on its last attempt; River discards the job", zap.Error(f.err), zap.Int("attempt", r.job.Attempt))
	default:
		log.Warn("apply failed; River retries it", zap.Error(f.err), zap.Int("attempt", r.job.Attempt), zap.Int("max_attempts", r.job.MaxAttempts))
	}
	// River records the error's text in the job's errors: the handler's
	// name and reason, as on the ledger row.
	return jobErr
}

// errDiscardedMeanwhile ends the job of an event discarded while it ran.
var errDiscardedMeanwhile = errors.New("the event was discarded while its apply ran; not applied")

// discarded reports whether the event's row is discarded now.
func (a *Applier) discarded(ctx context.Context, k EventKey) bool {
	var yes bool
	err := a.DB.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_event WHERE namespace = $1 AND event_id = $2 AND status = `+discardedSQL+`)`,
		k.Namespace, k.EventID).Scan(&yes)
	return err == nil && yes
}

// contentionDelay is the wait before an event's apply that met a lock
// tries again: outageDelay, doubling with each snooze of the job, at most
// a minute, so that an event whose business row stays locked holds a
// worker for EventLockTimeout ever more rarely.
func contentionDelay(job *rivertype.JobRow) time.Duration {
	var m struct {
		Snoozes int `json:"snoozes"`
	}
	_ = json.Unmarshal(job.Metadata, &m)
	return min(outageDelay<<min(m.Snoozes, 5), time.Minute)
}

// countFailure counts a failure of the events (not an outage's or a
// shutdown's) and adds it to the feed; it returns log with what the
// failure says of the event and of a panic.
func (a *Applier) countFailure(f *failure, log *zap.Logger) *zap.Logger {
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
	return log
}

// split replaces a failed batch job with one job per event, in one
// transaction with the job's completion: its own events and those of the
// absorbed jobs again names that still wait, which it completes. Nothing
// is recorded: every event's own job runs at once, and the one that fails
// fails there, with its error in its own job.
func (a *Applier) split(ctx context.Context, r *applyRun, again []int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return a.inTx(ctx, func(tx *Tx) error {
		if err := completeRunning(ctx, tx, r.job); err != nil {
			return err
		}
		keys := r.own
		if len(again) > 0 {
			jobs, err := absorb(ctx, tx, reabsorbSQL, again)
			if err != nil {
				return err
			}
			keys = mergeKeys(r.own, events(jobs))
		}
		keys, err := stillToApply(ctx, tx, keys, r.force)
		if err != nil {
			return err
		}
		params := make([]river.InsertManyParams, 0, len(keys))
		for _, k := range keys {
			params = append(params, river.InsertManyParams{Args: ApplyArgs{Namespace: k.Namespace, EventID: k.EventID, Force: r.force}})
		}
		return tx.InsertJobs(ctx, params)
	})
}

// stillToApply locks (FOR SHARE, in key order) the rows of keys that an
// apply, forced when force, would still apply, by the lifecycle table, and
// returns their keys: a split gives no job to an event discarded, erased
// or settled since its batch began, and one discarded after this holds
// the job this split gives it, which the discard cancels.
func stillToApply(ctx context.Context, tx *Tx, keys []EventKey, force bool) ([]EventKey, error) {
	namespaces, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		namespaces[i], ids[i] = k.Namespace, k.EventID
	}
	rows, err := tx.QueryContext(ctx, `SELECT e.namespace, e.event_id FROM webhook_event e
		WHERE (e.namespace, e.event_id) IN (SELECT * FROM unnest($1::text[], $2::text[])) AND `+applicableSQL("e", force)+`
		ORDER BY e.namespace COLLATE "C", e.event_id COLLATE "C" FOR SHARE`, namespaces, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []EventKey
	for rows.Next() {
		var k EventKey
		if err := rows.Scan(&k.Namespace, &k.EventID); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
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
