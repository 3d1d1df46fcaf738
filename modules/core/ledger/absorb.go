package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/riverqueue/river/rivertype"
)

// absorbEvents is the most events a job takes into its transaction, its
// own and those of the jobs it absorbs.
const absorbEvents = 256

// maxAbsorbedJobs bounds the jobs one apply considers absorbing.
const maxAbsorbedJobs = 31

// mayAbsorb reports whether a claim's job absorbs others: on its first
// run only. A job that runs again (a retry, a rescue, a snooze) runs with
// its own events, so an event that keeps failing never takes others into
// its failures.
func mayAbsorb(job *rivertype.JobRow) bool {
	if job.Attempt != 1 || len(job.Errors) > 0 {
		return false
	}
	var m struct {
		Snoozes int `json:"snoozes"`
	}
	return json.Unmarshal(job.Metadata, &m) != nil || m.Snoozes == 0
}

// Under load, the claim enqueues a job every few milliseconds (one per
// group commit), and River hands jobs to workers at most once per
// FetchCooldown, so jobs wait. A claim's job absorbs the claims' jobs
// waiting beside it: in its own transaction it locks them (skipping any
// that River or another apply has locked), marks them completed and
// applies their events with its own. The waiting jobs never run; their
// events settle, and they complete, when the absorbing transaction
// commits, and not at all when it rolls back. River's per-job work (its
// fetch, the job's transaction, its completion) and the apply's per-
// transaction statements are then paid once for many claim batches.
//
// Only a claim's jobs absorb and are absorbed (apply_batch, and
// apply_event marked fresh), and only while they never ran: a split's,
// a requeue's and a retry's jobs run alone, with their own events.
//
// absorbSQL takes such jobs of queue $1, other than job $2, oldest first
// as River would fetch them: it locks up to $3 that each fit in $4 events,
// skipping any that River or another apply holds, and keeps those whose
// events fit, counted in order, in $4. A job it locked and did not keep
// stays as it was, and waits for this transaction to end; one larger than
// the budget is never locked. The index river_job_absorbable holds the
// absorbable jobs only, so the statement reads no other job however many
// wait.
const absorbSQL = completeAbsorbed + `
	FROM (SELECT id FROM (
			SELECT id, sum(` + jobEvents + `) OVER (ORDER BY priority, scheduled_at, id) AS upto FROM (
				SELECT id, kind, args, priority, scheduled_at FROM river_job
				WHERE ` + absorbable + ` AND queue = $1 AND id <> $2 AND ` + jobEvents + ` <= $4
				ORDER BY priority, scheduled_at, id LIMIT $3
				FOR UPDATE SKIP LOCKED) locked) sized
		WHERE upto <= $4) w
	WHERE j.id = w.id
	RETURNING j.id, ` + absorbedEvents

// reabsorbSQL takes again those of jobs $1 that still wait, for the split
// of a failed apply that had absorbed them: the split completes them and
// runs their events in jobs of their own.
const reabsorbSQL = completeAbsorbed + `
	FROM (SELECT id FROM river_job WHERE id = ANY($1) AND state = 'available' AND attempted_at IS NULL
		ORDER BY id FOR UPDATE SKIP LOCKED) w
	WHERE j.id = w.id
	RETURNING j.id, ` + absorbedEvents

// completeAbsorbed marks the absorbed jobs w completed, as a run of
// River's would: one attempt, made and finished now.
const completeAbsorbed = `
	UPDATE river_job j SET state = 'completed', attempt = j.attempt + 1, attempted_at = now(), finalized_at = now()`

// absorbable selects the claims' jobs that wait and never ran, and whose
// arguments have the shape of a claim's: a job that has not is left to
// River, whose run of it fails it alone. (The ids of reabsorbSQL were
// absorbable; it finds them by key.)
const absorbable = `state = 'available' AND scheduled_at <= now() AND attempted_at IS NULL
	AND ((kind = 'apply_batch' AND jsonb_typeof(args->'events') = 'array')
		OR (kind = 'apply_event' AND args @> '{"fresh": true}' AND jsonb_typeof(args->'event_id') = 'string'))`

// jobEvents is the number of events a job carries.
const jobEvents = `CASE kind WHEN 'apply_batch' THEN jsonb_array_length(args->'events') ELSE 1 END`

// absorbedEvents is an absorbed job's events, as a JSON array of keys.
const absorbedEvents = `CASE j.kind WHEN 'apply_batch' THEN j.args->'events' ELSE jsonb_build_array(j.args) END`

// completeRunningSQL completes the running job $1 in the apply's
// transaction, as river.JobCompleteTx does for a job that records no
// output (no metadata updates, which no apply makes): River's statement
// for it sets the state of many jobs from arrays, which its database/sql
// driver encodes and decodes as text, about a millisecond of the
// service's CPU per apply. A job no longer running (rescued and taken by
// another worker) is left as it is, as River leaves it. River's own
// completion after the apply then finds the job completed, as after
// JobCompleteTx.
const completeRunningSQL = `
	WITH done AS (UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1 AND state = 'running')
	SELECT EXISTS (SELECT 1 FROM river_job WHERE id = $1)`

// completeRunning runs completeRunningSQL for job.
func completeRunning(ctx context.Context, tx *Tx, job *rivertype.JobRow) error {
	if job.State != rivertype.JobStateRunning {
		return fmt.Errorf("job %d is %s, not running", job.ID, job.State)
	}
	var exists bool
	if err := tx.QueryRowContext(ctx, completeRunningSQL, job.ID).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return rivertype.ErrNotFound
	}
	return nil
}

// absorbedJob is a job an apply absorbed, and its events.
type absorbedJob struct {
	id     int64
	events []EventKey
}

// absorb runs one of the statements above and returns the jobs it
// completed.
func absorb(ctx context.Context, tx *Tx, query string, args ...any) ([]absorbedJob, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, &dbError{fmt.Errorf("absorb waiting jobs: %w", err)}
	}
	defer rows.Close()
	var jobs []absorbedJob
	for rows.Next() {
		var (
			j   absorbedJob
			raw []byte
		)
		if err := rows.Scan(&j.id, &raw); err != nil {
			return nil, &dbError{fmt.Errorf("absorb waiting jobs: %w", err)}
		}
		if err := json.Unmarshal(raw, &j.events); err != nil {
			// Elements that are not keys: the apply rolls back as in an
			// outage, records nothing, and runs again alone (mayAbsorb).
			return nil, &dbError{fmt.Errorf("absorb job %d: %w", j.id, err)}
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, &dbError{fmt.Errorf("absorb waiting jobs: %w", err)}
	}
	return jobs, nil
}

// ids returns the jobs' ids.
func ids(jobs []absorbedJob) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.id
	}
	return out
}

// events returns the jobs' events.
func events(jobs []absorbedJob) []EventKey {
	var out []EventKey
	for _, j := range jobs {
		out = append(out, j.events...)
	}
	return out
}

// retake returns the absorbed jobs a failed apply's split takes back: the
// one that holds the failing event, when the failure is one absorbed
// event's; none when it is one of the job's own events; all of them when
// it is no one event's. The others rolled back with the apply and wait,
// to run, or be absorbed, whole.
func retake(jobs []absorbedJob, own []EventKey, failed EventKey) []int64 {
	if failed == (EventKey{}) {
		return ids(jobs)
	}
	if slices.Contains(own, failed) {
		return nil
	}
	for _, j := range jobs {
		if slices.Contains(j.events, failed) {
			return []int64{j.id}
		}
	}
	return nil
}

// mergeKeys returns own and more as one set in key order: an event is
// applied once however many jobs carry it.
func mergeKeys(own, more []EventKey) []EventKey {
	if len(more) == 0 {
		return own
	}
	all := append(append(make([]EventKey, 0, len(own)+len(more)), own...), more...)
	slices.SortFunc(all, EventKey.compare)
	return slices.Compact(all)
}
