package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookledger/hookledger/ent"
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
// it back. It never waits for a lock: a row or job that an apply holds
// right now (an apply that absorbed the event's job holds the job before
// it reaches the row) is tried again a few times, briefly, and then the
// discard answers ErrBeingApplied, having changed nothing; waiting would
// let the two deadlock, and the apply may settle the event meanwhile. It
// returns the row as Locate reads it: it opens no payload, so it needs no
// PAYLOAD_KEYS.
func (s *Store) Discard(ctx context.Context, namespace, eventID, reason string) (*ent.WebhookEvent, error) {
	reason, err := discardReason(reason)
	if err != nil {
		return nil, err
	}
	err = retryWhileApplied(ctx, func() error {
		return InTx(ctx, s.db, func(tx *Tx) error { return s.discard(ctx, tx, namespace, eventID, reason) })
	})
	if err != nil {
		return nil, err
	}
	return s.Locate(ctx, namespace, eventID)
}

// discardReason is a discard's reason as stored: trimmed, at most
// maxDiscardReason bytes; ErrNoReason when there is none.
func discardReason(reason string) (string, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return "", ErrNoReason
	}
	return truncate(reason, maxDiscardReason), nil
}

// retryWhileApplied runs try, and again while it meets an apply
// (errBeingApplied), after discardRetryWait, doubling, until the wait
// would pass discardRetryMax; then, or when ctx ends, it returns try's
// last error.
func retryWhileApplied(ctx context.Context, try func() error) error {
	for wait := discardRetryWait; ; wait *= 2 {
		err := try()
		if !errors.Is(err, errBeingApplied) || wait > discardRetryMax {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// A discard that meets an apply tries again after discardRetryWait,
// doubling, until the wait would pass discardRetryMax (about 0.6 s in
// all): an apply of one event takes milliseconds.
const (
	discardRetryWait = 20 * time.Millisecond
	discardRetryMax  = 320 * time.Millisecond
)

// discardGuard is the lifecycle table's guard of a discard's update.
var discardGuard = keyedGuardSQL(ActorDiscard, "e")

// discard is one try of Discard, in tx.
func (s *Store) discard(ctx context.Context, tx *Tx, namespace, eventID, reason string) error {
	var (
		status string
		erased bool
	)
	err := tx.QueryRowContext(ctx, `SELECT status, erased_at IS NOT NULL FROM webhook_event WHERE namespace = $1 AND event_id = $2 FOR UPDATE NOWAIT`,
		namespace, eventID).Scan(&status, &erased)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ErrNotFound
	case isLockNotAvailable(err):
		return errBeingApplied
	case err != nil:
		return fmt.Errorf("lock %s/%s: %w", namespace, eventID, err)
	}
	if _, err := step(ActorDiscard, stateOf(status, erased)); err != nil {
		return err
	}
	jobs, err := jobsOf(ctx, tx, namespace, eventID)
	if err != nil {
		return err
	}
	// Oldest first: jobsOf lists them newest first. Each is locked
	// without waiting before River cancels it.
	for _, j := range slices.Backward(jobs) {
		if j.batch || j.finished() {
			continue
		}
		switch err := lockJob(ctx, tx, j.id); {
		case isLockNotAvailable(err):
			return errBeingApplied
		case errors.Is(err, sql.ErrNoRows):
			continue // River deleted it meanwhile
		case err != nil:
			return fmt.Errorf("lock job %d: %w", j.id, err)
		}
		if _, err := s.jobs.JobCancelTx(ctx, tx.Tx, j.id); err != nil {
			return fmt.Errorf("cancel job %d: %w", j.id, err)
		}
	}
	var changed bool
	if err := tx.QueryRowContext(ctx, `UPDATE webhook_event e SET status = `+discardedSQL+`, discard_reason = $3
		WHERE namespace = $1 AND event_id = $2 AND `+discardGuard+` RETURNING true`, namespace, eventID, reason).Scan(&changed); err != nil {
		return fmt.Errorf("discard %s/%s: %w", namespace, eventID, err)
	}
	return nil
}

// isLockNotAvailable reports PostgreSQL's 55P03: a NOWAIT lock that
// another transaction holds.
func isLockNotAvailable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}
