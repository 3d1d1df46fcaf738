package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// ErrSettled is returned when requeueing a settled event without force.
var ErrSettled = errors.New("event is settled; requeue with force to apply it again")

// JobRetrier is the part of River's client requeue uses.
type JobRetrier interface {
	JobInserter
	JobRetryTx(ctx context.Context, tx *sql.Tx, id int64) (*rivertype.JobRow, error)
}

// RequeueResult says what Requeue did.
type RequeueResult string

// Requeue results.
const (
	// RequeueRetried: River still had the event's job; it runs now.
	RequeueRetried RequeueResult = "retried"
	// RequeueInserted: River no longer had a job; a new one was inserted.
	RequeueInserted RequeueResult = "inserted"
	// RequeueRunning: the job is running right now; nothing was changed.
	RequeueRunning RequeueResult = "running"
)

// Requeue sets the event's row back to claimed and makes its apply job run
// now, in one transaction: River's existing job when it still has one (never
// a second job beside a live retry), else a new one. A settled event is
// applied again only with force.
func Requeue(ctx context.Context, db *sql.DB, jobs JobRetrier, namespace, eventID string, force bool) (RequeueResult, error) {
	var result RequeueResult
	err := InTx(ctx, db, func(tx *Tx) error {
		var status string
		err := tx.QueryRowContext(ctx, `SELECT status FROM webhook_event WHERE namespace = $1 AND event_id = $2 FOR UPDATE`,
			namespace, eventID).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("lock %s/%s: %w", namespace, eventID, err)
		}
		if status == "settled" && !force {
			return ErrSettled
		}
		job, err := FindJob(ctx, tx, namespace, eventID)
		if err != nil {
			return err
		}
		if job != nil && job.State == string(rivertype.JobStateRunning) {
			result = RequeueRunning
			return nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE webhook_event SET status = 'claimed', settled_at = NULL WHERE namespace = $1 AND event_id = $2`,
			namespace, eventID); err != nil {
			return fmt.Errorf("requeue %s/%s: %w", namespace, eventID, err)
		}
		if job != nil {
			if _, err := jobs.JobRetryTx(ctx, tx.Tx, job.ID); err != nil {
				return fmt.Errorf("retry job %d: %w", job.ID, err)
			}
			result = RequeueRetried
			return nil
		}
		if _, err := jobs.InsertTx(ctx, tx.Tx, ApplyArgs{Namespace: namespace, EventID: eventID}, nil); err != nil {
			return fmt.Errorf("enqueue apply of %s/%s: %w", namespace, eventID, err)
		}
		result = RequeueInserted
		return nil
	})
	return result, err
}

// RequeueMatching requeues every row f selects (f.Status should be failed,
// or settled with force), oldest first, each in a transaction of its own.
// With dryRun it only counts them.
func RequeueMatching(ctx context.Context, db *sql.DB, jobs JobRetrier, f Filter, force, dryRun bool) (int, error) {
	client := entClient(db)
	n := 0
	f.After, f.Limit = 0, 500
	for {
		rows, next, err := List(ctx, client, f)
		if err != nil {
			return n, err
		}
		for _, r := range rows {
			if dryRun {
				n++
				continue
			}
			res, err := Requeue(ctx, db, jobs, r.Namespace, r.EventID, force)
			if errors.Is(err, ErrSettled) || errors.Is(err, ErrNotFound) {
				continue // settled or pruned since it was listed
			}
			if err != nil {
				return n, err
			}
			if res != RequeueRunning {
				n++
			}
		}
		if next == 0 {
			return n, nil
		}
		f.After = next
	}
}

var _ JobRetrier = (*river.Client[*sql.Tx])(nil)
