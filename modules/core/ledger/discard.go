package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/webhookevent"
)

// ErrNotDiscardable is returned when discarding a settled event: it was
// applied, and there is nothing to put away.
var ErrNotDiscardable = errors.New("event is settled; only an event that has not been applied can be discarded")

// ErrBeingApplied is returned when an event's row is locked by an apply
// running right now; try again when it ends.
var ErrBeingApplied = errBeingApplied

// ErrNoReason is returned when a discard gives no reason.
var ErrNoReason = errors.New("a discard needs a reason")

// maxDiscardReason bounds a discard's reason, in bytes.
const maxDiscardReason = 1000

// Discard puts away an event that will not be applied (a poison payload,
// an event for a customer that no longer exists): its row becomes
// discarded with the reason, leaves the backlog, and its own apply jobs
// that River still would run are cancelled, in one transaction with the
// row's lock. A batch job that still holds it skips it. Requeue brings
// it back.
func (s *Store) Discard(ctx context.Context, namespace, eventID, reason string) (*ent.WebhookEvent, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return nil, ErrNoReason
	}
	reason = truncate(reason, maxDiscardReason)
	err := InTx(ctx, s.db, func(tx *Tx) error {
		var status webhookevent.Status
		err := tx.QueryRowContext(ctx, `SELECT status FROM webhook_event WHERE namespace = $1 AND event_id = $2 FOR UPDATE NOWAIT`,
			namespace, eventID).Scan(&status)
		var pgErr *pgconn.PgError
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return ErrNotFound
		case errors.As(err, &pgErr) && pgErr.Code == "55P03":
			return errBeingApplied
		case err != nil:
			return fmt.Errorf("lock %s/%s: %w", namespace, eventID, err)
		case status == webhookevent.StatusSettled:
			return ErrNotDiscardable
		}
		if _, err := tx.ExecContext(ctx, `UPDATE webhook_event SET status = `+discardedSQL+`, discard_reason = $3
			WHERE namespace = $1 AND event_id = $2`, namespace, eventID, reason); err != nil {
			return fmt.Errorf("discard %s/%s: %w", namespace, eventID, err)
		}
		jobs, err := jobsOf(ctx, tx, namespace, eventID)
		if err != nil {
			return err
		}
		// Oldest first: jobsOf lists them newest first.
		for _, j := range slices.Backward(jobs) {
			if j.batch || j.finished() {
				continue
			}
			if _, err := s.jobs.JobCancelTx(ctx, tx.Tx, j.id); err != nil {
				return fmt.Errorf("cancel job %d: %w", j.id, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.Find(ctx, namespace, eventID)
}
