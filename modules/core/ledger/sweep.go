package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/modules/core/metrics"
)

// The sweep keeps River and the ledger in agreement. River's own actors
// change jobs without the ledger: River UI's Cancel and Delete, the
// rescuer that discards a job after its attempts are spent on crashes,
// River's cleaner that deletes finished jobs. A claimed row whose apply
// job they took is an orphan: nothing would ever apply it, and nothing
// would show it. The sweep, a periodic job the leader runs (and at
// start), finds claimed rows that no live job carries and, by the
// lifecycle table, either gives one a new apply job (its job is gone:
// deleted, lost) or marks it failed with a reason that names what River
// did (cancelled, given up on), so it shows on the Failed page until an
// operator requeues or discards it.

// DefaultSweepInterval is LEDGER_SWEEP_INTERVAL's default.
const DefaultSweepInterval = time.Minute

// sweepPage is how many orphan candidates one sweep transaction locks.
const sweepPage = 500

// SweepReport says what one sweep found and did.
type SweepReport struct {
	// NewJobs are orphans whose job was gone, given a new apply job.
	NewJobs int `json:"new_jobs"`
	// Failed are orphans whose job River stopped, marked failed.
	Failed int `json:"failed"`
}

// orphanCandidatesSQL reads the claimed rows (through the partial index
// of claimed and failed rows) that no live apply job carries, without
// locking them: nearly every claimed row has its job, and those it finds
// are locked and checked again (orphanSQL). The keys the live jobs carry
// are read once, into a hash the rows are matched against: one pass over
// the backlog's rows and its jobs, however many there are.
var orphanCandidatesSQL = `
	WITH carried AS (
		SELECT args->>'namespace' AS namespace, args->>'event_id' AS event_id FROM river_job
		WHERE kind = '` + ApplyArgs{}.Kind() + `' AND state IN ` + liveStates + `
		UNION ALL
		SELECT k->>'namespace', k->>'event_id' FROM river_job, jsonb_array_elements(args->'events') k
		WHERE kind = '` + ApplyBatchArgs{}.Kind() + `' AND state IN ` + liveStates + ` AND jsonb_typeof(args->'events') = 'array')
	SELECT e.id FROM webhook_event e
	WHERE e.status = ` + claimedSQL + `
		AND NOT EXISTS (SELECT FROM carried c WHERE c.namespace = e.namespace AND c.event_id = e.event_id)
	ORDER BY e.id`

// lockOrphansSQL locks the candidate rows $1 that are still claimed,
// skipping any a path holds now (an apply, a requeue: they give the row
// its job).
var lockOrphansSQL = `
	SELECT e.id FROM webhook_event e
	WHERE e.id = ANY($1) AND ` + guardSQL(ActorRiverLost, "e") + `
	ORDER BY e.id FOR UPDATE SKIP LOCKED`

// orphanSQL returns those of the locked rows $1 that have no live job,
// read in a statement after the lock (whose snapshot holds every job a
// path gave them before it), with the newest apply job that carried each,
// finished or not: what River did to it.
var orphanSQL = `
	SELECT e.id, e.namespace, e.event_id, j.id, j.state::text, j.attempt
	FROM webhook_event e
	LEFT JOIN LATERAL (
		SELECT id, state, attempt FROM (SELECT * FROM river_job
			WHERE ` + ownApplyJobOf("e") + ` OR ` + batchHoldingOf("e") + ` OFFSET 0) carrying
		ORDER BY id DESC LIMIT 1) j ON true
	WHERE e.id = ANY($1)
		AND NOT EXISTS (SELECT 1 FROM river_job WHERE (` + ownApplyJobOf("e") + ` OR ` + batchHoldingOf("e") + `) AND state IN ` + liveStates + `)`

// ownApplyJobOf and batchHoldingOf are ownApplyJob and batchHolding for
// the row aliased alias.
func ownApplyJobOf(alias string) string { return "(" + keysOf(alias).Replace(ownApplyJob) + ")" }

func batchHoldingOf(alias string) string { return "(" + keysOf(alias).Replace(batchHolding) + ")" }

// keysOf puts the namespace and event id of the row aliased alias in
// place of ownApplyJob's and batchHolding's parameters.
func keysOf(alias string) *strings.Replacer {
	return strings.NewReplacer("$1", alias+".namespace", "$2", alias+".event_id")
}

// failOrphanSQL marks orphan $1 failed with the reason $2 (River's job $3),
// under the lifecycle table's guard, and adds the reason to its failure
// log; attempts stay, as no handler ran.
var failOrphanSQL = `
	UPDATE webhook_event e
	SET status = ` + failedSQL + `, failures = failures + 1, failing_since = COALESCE(failing_since, now()), last_error = $2::text,
		failure_log = jsonb_path_query_array(COALESCE(failure_log, '[]'::jsonb) || jsonb_strip_nulls(jsonb_build_object(
			'attempt', attempts, 'job_id', NULLIF($3::bigint, 0), 'at', now(), 'error', $2::text)),
			'$[last-` + fmt.Sprint(maxFailureLog-1) + ` to last]')
	WHERE id = $1 AND ` + guardSQL(ActorRiverStopped, "e") + `
	RETURNING true`

// Sweep finds orphans (claimed rows that no live apply job carries) and
// deals with each by the lifecycle table, in a transaction per page:
// a row whose newest job River cancelled or discarded becomes failed with
// a reason naming it; any other (its job deleted, lost, or finished
// without settling it) gets a new apply job, inserted through jobs. It
// reports what its statements changed.
func Sweep(ctx context.Context, db *sql.DB, jobs JobInserter) (SweepReport, error) {
	var r SweepReport
	ids, err := scanIDs(db.QueryContext(ctx, orphanCandidatesSQL))
	if err != nil {
		return r, fmt.Errorf("sweep: find orphans: %w", err)
	}
	for page := range slices.Chunk(ids, sweepPage) {
		if err := InTxWithJobs(ctx, db, jobs, func(tx *Tx) error { return sweepPageOf(ctx, tx, page, &r) }); err != nil {
			return r, fmt.Errorf("sweep: %w", err)
		}
	}
	return r, nil
}

// orphan is a claimed row no live job carries, and River's newest job
// that carried it.
type orphan struct {
	id       int64
	key      EventKey
	jobID    sql.NullInt64
	jobState sql.NullString
	attempt  sql.NullInt64
}

// sweepPageOf deals with the orphans among ids, in tx.
func sweepPageOf(ctx context.Context, tx *Tx, ids []int64, r *SweepReport) error {
	locked, err := scanIDs(tx.QueryContext(ctx, lockOrphansSQL, ids))
	if err != nil || len(locked) == 0 {
		return err
	}
	rows, err := tx.QueryContext(ctx, orphanSQL, locked)
	if err != nil {
		return err
	}
	var orphans []orphan
	for rows.Next() {
		var o orphan
		if err := rows.Scan(&o.id, &o.key.Namespace, &o.key.EventID, &o.jobID, &o.jobState, &o.attempt); err != nil {
			rows.Close()
			return err
		}
		orphans = append(orphans, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var params []river.InsertManyParams
	for _, o := range orphans {
		reason := o.stopped()
		if reason == "" {
			params = append(params, river.InsertManyParams{Args: ApplyArgs{Namespace: o.key.Namespace, EventID: o.key.EventID}})
			continue
		}
		var changed bool
		err := tx.QueryRowContext(ctx, failOrphanSQL, o.id, reason, o.jobID.Int64).Scan(&changed)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("fail orphan %s/%s: %w", o.key.Namespace, o.key.EventID, err)
		default:
			r.Failed++
		}
	}
	if err := tx.InsertJobs(ctx, params); err != nil {
		return err
	}
	r.NewJobs += len(params)
	return nil
}

// scanIDs reads a column of ids.
func scanIDs(rows *sql.Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// stopped is the reason an orphan fails when River stopped its job, ""
// when its job is gone and it gets a new one.
func (o orphan) stopped() string {
	switch o.jobState.String {
	case "cancelled":
		return fmt.Sprintf("apply job %d was cancelled in River (River UI's Cancel, or River's API) before it applied the event: requeue it to apply it, or discard it", o.jobID.Int64)
	case "discarded":
		return fmt.Sprintf("River gave up on apply job %d after %d attempts (crash rescues count as attempts) before it applied the event: requeue it to apply it, or discard it", o.jobID.Int64, o.attempt.Int64)
	}
	return ""
}

// SweepArgs is the ledger sweep's job.
type SweepArgs struct{}

// Kind names the job in River.
func (SweepArgs) Kind() string { return "ledger_sweep" }

// SweepWorker runs Sweep.
type SweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	DB      *sql.DB
	Logger  *zap.Logger
	Metrics *metrics.Set
}

// Work sweeps once, inserting new jobs through the River client that runs
// it, and counts what it found in hookledger_ledger_orphans.
func (w *SweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	var jobs JobInserter
	if client, err := river.ClientFromContextSafely[*sql.Tx](ctx); err == nil {
		jobs = client
	}
	r, err := Sweep(ctx, w.DB, jobs)
	if r.NewJobs > 0 {
		w.Metrics.LedgerOrphans.WithLabelValues("new_job").Add(float64(r.NewJobs))
	}
	if r.Failed > 0 {
		w.Metrics.LedgerOrphans.WithLabelValues("failed").Add(float64(r.Failed))
	}
	if r.NewJobs > 0 || r.Failed > 0 {
		w.Logger.Warn("claimed events had no apply job in River: given a new job, or marked failed with what River did to theirs",
			zap.Int("new_jobs", r.NewJobs), zap.Int("failed", r.Failed))
	}
	return err
}

// Timeout bounds one sweep.
func (w *SweepWorker) Timeout(*river.Job[SweepArgs]) time.Duration { return 10 * time.Minute }

// SweepPeriodically is the sweep as a periodic job of the leader, run at
// start too.
func SweepPeriodically(interval time.Duration) *river.PeriodicJob {
	return leaderPeriodically(interval, SweepArgs{})
}

// leaderPeriodically is a periodic job of args every interval, which
// River runs on the elected leader, and once at start; its id is its kind.
func leaderPeriodically(interval time.Duration, args river.JobArgs) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return args, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: args.Kind()})
}
