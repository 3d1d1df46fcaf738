package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/riverqueue/river/rivertype"
)

// absorbEvents is about the most events a job takes into its
// transaction, its own and those of the jobs it absorbs, when the jobs
// waiting are the size of its own.
const absorbEvents = 256

// maxAbsorbedJobs bounds the jobs one apply absorbs, whatever their size:
// at most 32 claim batches (of up to CLAIM_BATCH_MAX events) in one
// transaction.
const maxAbsorbedJobs = 31

// absorbLimit is how many waiting jobs a job of n events absorbs.
func absorbLimit(n int) int {
	return min(absorbEvents/max(n, 1)-1, maxAbsorbedJobs)
}

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
// absorbSQL takes up to $3 such jobs of queue $1, other than job $2, oldest
// first as River would fetch them.
const absorbSQL = `
	UPDATE river_job j SET state = 'completed', attempt = j.attempt + 1, attempted_at = now(), finalized_at = now()
	FROM (SELECT id FROM river_job
		WHERE state = 'available' AND queue = $1 AND id <> $2 AND scheduled_at <= now() AND attempted_at IS NULL
			AND (kind = 'apply_batch' OR (kind = 'apply_event' AND args @> '{"fresh": true}'))
		ORDER BY priority, scheduled_at, id LIMIT $3 FOR UPDATE SKIP LOCKED) w
	WHERE j.id = w.id
	RETURNING j.id, ` + absorbedEvents

// reabsorbSQL takes again those of jobs $1 that still wait, for the split
// of a failed apply that had absorbed them: the split completes them and
// runs their events in jobs of their own.
const reabsorbSQL = `
	UPDATE river_job j SET state = 'completed', attempt = j.attempt + 1, attempted_at = now(), finalized_at = now()
	FROM (SELECT id FROM river_job
		WHERE id = ANY($1) AND state = 'available' AND attempted_at IS NULL
		ORDER BY id FOR UPDATE SKIP LOCKED) w
	WHERE j.id = w.id
	RETURNING j.id, ` + absorbedEvents

// absorbedEvents is an absorbed job's events, as a JSON array of keys.
const absorbedEvents = `CASE j.kind WHEN 'apply_batch' THEN j.args->'events' ELSE jsonb_build_array(j.args) END`

// absorb runs one of the statements above and returns the jobs it
// completed and their events.
func absorb(ctx context.Context, tx *Tx, query string, args ...any) ([]int64, []EventKey, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, nil, &dbError{fmt.Errorf("absorb waiting jobs: %w", err)}
	}
	defer rows.Close()
	var (
		ids  []int64
		keys []EventKey
	)
	for rows.Next() {
		var (
			id     int64
			raw    []byte
			events []EventKey
		)
		if err := rows.Scan(&id, &raw); err != nil {
			return nil, nil, &dbError{fmt.Errorf("absorb waiting jobs: %w", err)}
		}
		if err := json.Unmarshal(raw, &events); err != nil {
			return nil, nil, fmt.Errorf("absorb job %d: %w", id, err)
		}
		ids = append(ids, id)
		keys = append(keys, events...)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, &dbError{fmt.Errorf("absorb waiting jobs: %w", err)}
	}
	return ids, keys, nil
}

// mergeKeys returns own and more as one set in key order: an event is
// applied once however many jobs carry it.
func mergeKeys(own, more []EventKey) []EventKey {
	if len(more) == 0 {
		return own
	}
	all := append(append(make([]EventKey, 0, len(own)+len(more)), own...), more...)
	slices.SortFunc(all, func(a, b EventKey) int {
		switch {
		case a.less(b):
			return -1
		case b.less(a):
			return 1
		}
		return 0
	})
	return slices.Compact(all)
}
