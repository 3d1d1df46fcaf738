package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/riverqueue/river"

	"github.com/hookledger/hookledger/ent/schema"
	"github.com/hookledger/hookledger/ent/webhookevent"
)

// ApplyArgs is the apply job of one event: the ledger key, never the
// payload.
type ApplyArgs struct {
	Namespace string `json:"namespace"`
	EventID   string `json:"event_id"`
	// Force applies the event even when it is already settled.
	Force bool `json:"force,omitempty"`
	// Fresh marks the job a claim enqueued for its one event, which may
	// absorb other claims' jobs and be absorbed (absorb.go); a split's, a
	// requeue's and a retry's jobs are not.
	Fresh bool `json:"fresh,omitempty"`
}

// Kind names the job in River.
func (ApplyArgs) Kind() string { return "apply_event" }

// InsertOpts gives every apply job the same attempt budget.
func (ApplyArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: ApplyMaxAttempts}
}

func (a ApplyArgs) key() EventKey { return EventKey{Namespace: a.Namespace, EventID: a.EventID} }

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

// Apply job tuning. A killed worker's job is rescued after
// RescueStuckJobsAfter (River checks every 30 s), so every claimed event
// settles within two minutes of a restart.
const (
	// ApplyMaxAttempts is River's attempt budget for an apply job: the
	// attempts whose backoff (RetryDelay) first spans RetryHorizon. A
	// handler's failure spends one, as does a run lost to a crash (River's
	// rescuer counts those); an outage of the database and a shutdown
	// snooze the job and spend none. When the last fails, River discards
	// the job and the row stays failed with the reason.
	ApplyMaxAttempts     = 84
	ApplyTimeout         = 20 * time.Second
	RescueStuckJobsAfter = 30 * time.Second
	// RetryHorizon is how long an event whose handler keeps failing is
	// retried: longer than Stripe's three days of delivery retries, so a
	// handler fixed while the provider still retries is in time for every
	// event that failed.
	RetryHorizon  = 72 * time.Hour
	maxRetryDelay = time.Hour
	// outageDelay is the wait before an apply that could not reach the
	// database runs again: not an attempt, and not backed off, so events
	// settle within seconds of the database coming back.
	outageDelay = 2 * time.Second
)

// Outcome is what one apply did.
type Outcome string

// Apply outcomes.
const (
	OutcomeSettled Outcome = "settled"
	// OutcomeSkipped: the row was settled before this job ran (a
	// rescued or duplicate job); nothing was applied.
	OutcomeSkipped Outcome = "skipped"
	// OutcomeUnhandled: no handler matches the event's type; the row is
	// settled with nothing applied.
	OutcomeUnhandled Outcome = "unhandled"
	OutcomeFailed    Outcome = "failed"
)

// Apply settles the ledger row of args and runs its handlers, all inside
// tx, by the steps of an apply job (applyRun) without the job's own (no
// absorb, no completion): the caller commits tx, with its job's completion
// if it has one. The row is marked settled first, in the statement that
// locks it: the transaction makes that invisible until the handlers
// succeed, and a failure rolls it back with them. A row already settled is left alone unless args.Force.
// The writes the handlers staged (Write) are made before it returns. The
// ledger's own statements run with the planner settings of applyPlanSQL,
// the handlers with the transaction's own.
func Apply(ctx context.Context, tx *Tx, reg *Registry, args ApplyArgs) (*Event, Outcome, error) {
	r := newApplyRun(&Applier{Registry: reg}, nil, []EventKey{args.key()}, args.Force, false)
	if err := r.apply(ctx, tx); err != nil {
		return r.ev, OutcomeFailed, err
	}
	return r.done[0].ev, r.done[0].outcome, nil
}

// flushStaged makes the writes the handlers staged (flushWrites), guarded
// as a handler is: a panic or a hang fails the apply like a handler's
// would.
func flushStaged(ctx context.Context, tx *Tx) error {
	if tx.writes == nil {
		return nil
	}
	err := runHandler(ctx, tx, func(ctx context.Context, tx *Tx, _ *Event) error {
		return flushWrites(ctx, tx)
	}, nil)
	var named *HandlerError
	if err != nil && !errors.As(err, &named) {
		// Abandoned at the apply's end, or stopped in the key locks: the
		// failure is the Writes' whose flush ran, and says so.
		if name := tx.flushing.Load(); name != nil {
			return &HandlerError{Handler: *name, Err: err}
		}
	}
	return err
}

// applyPlanSQL opens every apply transaction (planApply), for the
// ledger's own statements only: unplanApplySQL ends it before the first
// handler, so that modules' statements (their Writes included) run with
// PostgreSQL's default planner settings.
// Each statement of the ledger's (the absorb, River's job completion, the
// settle) reaches a batch's rows by key, and is run once per batch of tens
// of events, so planning it for every batch is a large part of its cost:
// on PostgreSQL 15, 1.55 ms per batch of 32 events across the settle,
// the subscription lock and River's completion (pg_stat_statements with
// track_planning, apply alone), about a sixth of the apply's database CPU.
// Cached generic plans remove that, but a generic plan is costed once, for
// the table's size at the time and ten keys assumed: on a ledger that was
// small then, as every new one is, a hash join over a sequential scan wins
// and is kept as the ledger grows (22 ms a batch at 30,000 rows, against
// 0.5 ms by index; TestLockPlanIgnoresStaleStats). With sequential scans,
// hash and merge joins off, the only plan left is a probe per key, which
// is right for a batch on a ledger of any size.
const applyPlanSQL = `SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off; ` +
	`SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off`

// ApplyLockTimeout bounds how long the staged writes of an apply of
// several events (a batch, or a job that absorbed others) wait for a lock
// (PostgreSQL's lock_timeout, for the rest of the apply's transaction),
// and EventLockTimeout those of an apply of one event. The ledger's own
// statements wait as long as they must: only applies hold their rows and
// River's, for their own short time. The writes take them once
// the apply holds its keys' advisory locks (lockWriteKeys), which it
// waits for without a bound: an apply that shares a key with another
// waits its turn, as long as that one takes, and the writes then wait
// only for sessions that are not applies. A business row that a long
// report query, a migration or a hot customer holds then delays only the
// events that write it: a batch that meets it gives way and splits into
// one job per event, and the event that writes it tries again in a job
// of its own, snoozed between tries (contention is not an attempt),
// holding a worker for EventLockTimeout a try, while the others settle.
// Without them, a batch would wait out ApplyTimeout, holding a worker
// meanwhile.
const (
	ApplyLockTimeout = 500 * time.Millisecond
	EventLockTimeout = 100 * time.Millisecond
)

// lockTimeoutValue is d as a value of PostgreSQL's lock_timeout.
func lockTimeoutValue(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// The lock timeouts of staged writes, as lock_timeout values.
var (
	batchWriteLockTimeout = lockTimeoutValue(ApplyLockTimeout)
	eventWriteLockTimeout = lockTimeoutValue(EventLockTimeout)
)

// unplanApplySQL gives the rest of the apply transaction, its handlers and
// their writes, the planner settings it would have had without
// applyPlanSQL.
const unplanApplySQL = `SET LOCAL plan_cache_mode TO DEFAULT; SET LOCAL enable_seqscan TO DEFAULT; ` +
	`SET LOCAL enable_hashjoin TO DEFAULT; SET LOCAL enable_mergejoin TO DEFAULT`

// planApply runs applyPlanSQL, the first statement of every apply
// transaction.
func planApply(ctx context.Context, tx *Tx) error {
	if _, err := tx.ExecContext(ctx, applyPlanSQL); err != nil {
		return &dbError{fmt.Errorf("plan the apply: %w", err)}
	}
	return nil
}

// unplanApply runs unplanApplySQL, after the ledger's last statement of
// an apply and before its first handler, and sets the lock timeout of the
// staged writes the apply will flush: ApplyLockTimeout for an apply of
// several events, EventLockTimeout for one event's.
func unplanApply(ctx context.Context, tx *Tx, events int) error {
	tx.writeLockTimeout = batchWriteLockTimeout
	if events == 1 {
		tx.writeLockTimeout = eventWriteLockTimeout
	}
	if _, err := tx.ExecContext(ctx, unplanApplySQL); err != nil {
		return &dbError{fmt.Errorf("plan the handlers: %w", err)}
	}
	return nil
}

// The lifecycle table's guards of the apply's statements: the rows an
// apply settles, a forced one settles, a failure is recorded on, and a
// forced re-apply's failure is recorded on.
var (
	applyGuard     = applicableSQL("e", false)
	forceGuard     = applicableSQL("webhook_event", true)
	failGuard      = keyedGuardSQL(ActorApplyFailed, "webhook_event")
	forceFailGuard = keyedGuardSQL(ActorForceFailed, "webhook_event")
)

// applicableSQL is the guard of the rows an apply, forced when force,
// applies: the lifecycle table's "apply succeeded" rows, and a forced
// re-apply's.
func applicableSQL(alias string, force bool) string {
	if !force {
		return keyedGuardSQL(ActorApplied, alias)
	}
	return "(" + keyedGuardSQL(ActorApplied, alias) + " OR " + keyedGuardSQL(ActorForce, alias) + ")"
}

// lockedRow is a ledger row that lockForApply locked and marked settled.
type lockedRow struct {
	// ev is the row's event; its Payload is as stored (sealed, or nil for
	// a payload the process kept) until the apply opens it.
	ev *Event
	// seen is the row's attempts before this attempt.
	seen int
}

// lockForApply locks the rows of keys and marks them settled, in one
// statement whatever their number (the batch's round trips do not grow
// with it), in key order (byte order, as Go sorts keys). The transaction
// makes the settle invisible until the handlers succeed, and a failure
// rolls it back with them. A row already settled is left alone unless
// force, and is missing from the answer, as is a row that does not exist.
func lockForApply(ctx context.Context, tx *Tx, reg *Registry, keys []EventKey, force bool, kept map[EventKey][]byte) (map[EventKey]*lockedRow, error) {
	namespaces, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		namespaces[i], ids[i] = k.Namespace, k.EventID
	}
	// An apply settles unsettled rows, and its update locks them as it
	// reaches them, in key order through the unique index (applyPlanSQL
	// leaves the planner no other way): a row lock and a second index probe
	// fewer per row than a locking subquery (a sixth of the statement's
	// cost). Two applies of overlapping batches (a rescued or requeued job
	// beside the first; batches of fresh claims never overlap) lock in the
	// same order; should they still meet, PostgreSQL ends one after
	// deadlock_timeout and the apply retries it as contention, not counted
	// as an attempt. A forced apply also settles rows that were settled,
	// and must know which were, so it locks them in a subquery first, in
	// key order, and reads their status there; it passes erased rows by,
	// whose payload is gone, and discarded ones, which only a requeue
	// brings back (the lifecycle table's guards).
	//
	// The payloads this process claimed and still keeps (kept) are not
	// read back: the statement returns NULL for them, and never reads them
	// out of TOAST.
	cached := make([]bool, len(keys))
	for i, k := range keys {
		_, cached[i] = kept[k]
	}
	query := `
		UPDATE webhook_event e
		SET status = ` + settledSQL + `, settled_at = now(), attempts = e.attempts + 1, last_error = NULL,
			failures = 0, failing_since = NULL, handlers = ` + handlersSQL(4) + `
		FROM unnest($1::text[], $2::text[], $3::boolean[]) AS k(namespace, event_id, kept)
		WHERE e.namespace = k.namespace AND e.event_id = k.event_id AND ` + applyGuard + `
		RETURNING e.namespace, e.event_id, e.provider, e.source, e.event_type, CASE WHEN k.kept THEN NULL ELSE e.payload END,
			e.occurred_at, e.replayed, '' AS old_status, e.attempts`
	args := append([]any{namespaces, ids, cached}, reg.patterns()...)
	if force {
		// Forced: the rows' status before, for Event.Forced.
		query = `
		UPDATE webhook_event e
		SET status = ` + settledSQL + `, attempts = e.attempts + 1, last_error = NULL,
			failures = 0, failing_since = NULL, handlers = ` + handlersSQL(3) + `,
			-- A re-apply keeps the time the event first settled: apply
			-- latency is the first settle's.
			settled_at = CASE WHEN old.status = ` + settledSQL + ` THEN e.settled_at ELSE now() END
		FROM (SELECT id, status FROM webhook_event
			WHERE (namespace, event_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))
				AND ` + forceGuard + `
			ORDER BY namespace COLLATE "C", event_id COLLATE "C" FOR UPDATE) old
		WHERE e.id = old.id
		RETURNING e.namespace, e.event_id, e.provider, e.source, e.event_type, e.payload, e.occurred_at, e.replayed, old.status, e.attempts`
		args = append([]any{namespaces, ids}, reg.patterns()...)
	}
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, &dbError{fmt.Errorf("lock %d event(s): %w", len(keys), err)}
	}
	defer rows.Close()
	out := make(map[EventKey]*lockedRow, len(keys))
	for rows.Next() {
		var (
			ev         Event
			occurredAt sql.NullTime
			payload    []byte
			wasStatus  string
			attempts   int
		)
		if err := rows.Scan(&ev.Namespace, &ev.EventID, &ev.Provider, &ev.Source, &ev.Type, &payload, &occurredAt, &ev.Replayed,
			&wasStatus, &attempts); err != nil {
			return nil, &dbError{fmt.Errorf("lock %d event(s): %w", len(keys), err)}
		}
		ev.Payload, ev.OccurredAt = payload, occurredAt.Time
		ev.Forced = force && wasStatus == string(webhookevent.StatusSettled)
		out[EventKey{Namespace: ev.Namespace, EventID: ev.EventID}] = &lockedRow{ev: &ev, seen: attempts - 1}
	}
	if err := rows.Err(); err != nil {
		return nil, &dbError{fmt.Errorf("lock %d event(s): %w", len(keys), err)}
	}
	return out, nil
}

// handlersSQL is the modules whose handlers apply row e, as a jsonb array
// in the order they run, from the registry's registrations
// (Registry.patterns) bound as the five parameters from $n of the settle
// statement: the modules are recorded in the statement that settles the
// row, and the transaction keeps them only when they all succeed.
func handlersSQL(n int) string {
	p := func(i int) string { return "$" + strconv.Itoa(n+i) }
	return `(SELECT COALESCE(jsonb_agg(m.module ORDER BY m.rank), '[]'::jsonb)
	FROM (SELECT r.module, min(r.rank) AS rank
		FROM unnest(` + p(0) + `::text[], ` + p(1) + `::text[], ` + p(2) + `::boolean[], ` + p(3) + `::text[], ` + p(4) + `::int[])
			AS r(provider, pattern, family, module, rank)
		WHERE r.provider = e.provider AND CASE WHEN r.family THEN starts_with(e.event_type, r.pattern) ELSE e.event_type = r.pattern END
		GROUP BY r.module) m)`
}

// applyLocked runs the handlers of a row lockForApply locked; a nil row was
// already settled, or is gone.
func applyLocked(ctx context.Context, tx *Tx, reg *Registry, k EventKey, row *lockedRow) (*Event, Outcome, int, error) {
	if row == nil {
		ev, outcome, err := settledOrGone(ctx, tx, &Event{Namespace: k.Namespace, EventID: k.EventID})
		return ev, outcome, -1, err
	}
	ev := row.ev
	handlers := reg.handlers(ev.Provider, ev.Type)
	if len(handlers) == 0 {
		return ev, OutcomeUnhandled, row.seen, nil
	}
	for _, h := range handlers {
		if err := runHandler(ctx, tx, h.fn, ev); err != nil {
			return ev, OutcomeFailed, row.seen, &HandlerError{Handler: h.name, Err: err}
		}
	}
	return ev, OutcomeSettled, row.seen, nil
}

// runHandler runs h, turning a panic into an error: a panicking handler
// fails its event like any other failure. A handler that does not return
// when the apply's context ends (an outbound call without a deadline) is
// abandoned: the apply fails with the context's error, and database/sql
// rolls the transaction back, releasing the row lock, while the handler's
// goroutine is left to finish on its own.
func runHandler(ctx context.Context, tx *Tx, h HandlerFunc, ev *Event) error {
	done := make(chan error, 1)
	goHandler(func() {
		defer func() {
			if v := recover(); v != nil {
				done <- &PanicError{Value: v, Stack: stack()}
			}
		}()
		done <- h(ctx, tx, ev)
	})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("handler still running when the apply ended, abandoned: %w", context.Cause(ctx))
	}
}

// handlerRunner is a goroutine that runs handlers for runHandler, one at a
// time. Runners are kept between handlers (idleRunners), so that a handler
// runs on a stack that earlier ones grew: a handler that reads a payload
// with provider.Fields recurses as deep as the JSON nests, and on a
// new goroutine's stack every event paid for growing it (a tenth of the
// apply's CPU). A runner whose handler hangs is abandoned with it, and
// comes back when the handler returns.
type handlerRunner chan func()

// idleRunners holds the runners waiting for a handler; runners beyond its
// capacity end when their handler returns.
var idleRunners = make(chan handlerRunner, 64)

// goHandler runs f on an idle runner, else on a new one.
func goHandler(f func()) {
	select {
	case r := <-idleRunners:
		r <- f
	default:
		r := make(handlerRunner)
		go r.run(f)
	}
}

func (r handlerRunner) run(f func()) {
	for {
		f()
		select {
		case idleRunners <- r:
		default:
			return
		}
		f = <-r
	}
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
		return nil, OutcomeFailed, &dbError{fmt.Errorf("read %s/%s: %w", ev.Namespace, ev.EventID, err)}
	}
	return ev, OutcomeSkipped, nil
}

// Attempt identifies one apply attempt of an event for its failure record.
type Attempt struct {
	Key EventKey
	// Seen is the row's attempts before the attempt, as the attempt read it
	// under the row lock; -1 when the attempt never got that far.
	Seen int
}

// Failure is one entry of a ledger row's failure log.
type Failure = schema.Failure

// maxFailureLog bounds the failures a row keeps, the newest.
const maxFailureLog = 10

// RecordFailure marks the attempt's ledger row failed with f's error, in a
// statement of its own after the apply transaction rolled back, and adds
// f to the row's failure log. It never overwrites an apply that committed:
// the row must still have the attempts the attempt saw (or, when it saw
// none, must not be settled), and it leaves a discarded row alone. A
// forced re-apply of a settled row that failed leaves it settled, its
// first settled_at kept, with the failure in its log: the event was
// applied (the lifecycle table's "forced re-apply failed").
func RecordFailure(ctx context.Context, db *sql.DB, a Attempt, f Failure) error {
	_, err := recordFailure(ctx, db, a, f)
	return err
}

// recordFailure is RecordFailure that says whether it changed the row; ok
// is false when the row was left alone.
func recordFailure(ctx context.Context, db *sql.DB, a Attempt, f Failure) (ok bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = db.QueryRowContext(ctx, `
		UPDATE webhook_event
		SET status = CASE WHEN status = `+settledSQL+` THEN status ELSE `+failedSQL+` END, attempts = attempts + 1,
			failures = CASE WHEN status = `+settledSQL+` THEN failures ELSE failures + 1 END,
			failing_since = CASE WHEN status = `+settledSQL+` THEN failing_since ELSE COALESCE(failing_since, now()) END,
			last_error = $3::text,
			failure_log = jsonb_path_query_array(COALESCE(failure_log, '[]'::jsonb) || jsonb_strip_nulls(jsonb_build_object(
				'attempt', attempts + 1, 'job_id', NULLIF($5::bigint, 0), 'at', now(), 'handler', NULLIF($6::text, ''), 'error', $3::text)),
				'$[last-`+strconv.Itoa(maxFailureLog-1)+` to last]')
		WHERE namespace = $1 AND event_id = $2
			AND (`+failGuard+` OR ($4 >= 0 AND `+forceFailGuard+`))
			AND ($4 < 0 OR attempts = $4)
		RETURNING true`,
		a.Key.Namespace, a.Key.EventID, truncate(f.Error, 4000), a.Seen, f.JobID, f.Handler,
	).Scan(&ok)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record failure of %s/%s: %w", a.Key.Namespace, a.Key.EventID, err)
	}
	return true, nil
}

// RetryDelay is the wait after a job's attempt n failed (1-based): one
// second, doubling, capped at maxRetryDelay, with up to a quarter more as
// jitter. ApplyMaxAttempts of them span RetryHorizon.
func RetryDelay(n int) time.Duration {
	d := retryBase(n)
	return d + rand.N(d/4+1)
}

// retryBase is RetryDelay without its jitter.
func retryBase(n int) time.Duration {
	if n >= 20 {
		return maxRetryDelay
	}
	return min(time.Second<<max(n-1, 0), maxRetryDelay)
}

// truncate makes s storable as text (valid UTF-8, no NUL) and cuts it to at
// most n bytes on a rune boundary.
func truncate(s string, n int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
