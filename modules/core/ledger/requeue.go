package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/riverqueue/river/rivertype"

	"github.com/hookledger/hookledger/ent/webhookevent"
)

// ErrSettled is returned when requeueing a settled event without force.
var ErrSettled = errors.New("event is settled; requeue with force to apply it again")

// ErrErased is returned when requeueing an event whose payload was erased:
// there is nothing left to apply.
var ErrErased = errors.New("event was erased (hookledger erase): its payload is gone, so it cannot be applied again")

// RequeueResult says what Requeue did.
type RequeueResult string

// Requeue results.
const (
	// RequeueRequeued: the event is applied now, by a job of its own:
	// River's pending one brought forward, or a new one.
	RequeueRequeued RequeueResult = "requeued"
	// RequeuePending: the event is being applied right now (its row is
	// locked by an apply, or a job that will apply it is running); nothing
	// was changed.
	RequeuePending RequeueResult = "pending"
)

// Requeue makes the event's apply run now, in one transaction with the
// row's lock: River's existing job of the event when it still has one
// (brought forward, whatever its state), else a new one, so there is never
// a second job beside a live retry. It targets the event, not a shared job:
// a batch job counts only while it is unfinished, and a forced re-apply of
// a settled event runs only in a forced job of its own, so each requested
// event is applied exactly once more. A job that will apply the event and
// is running right now is left alone (RequeuePending). A failed
// or discarded row goes back to claimed with its backoff reset, its job
// with a whole budget of attempts; a settled one is applied again
// only with force, and stays settled until that apply commits. The
// Store's River client needs no workers for this: an insert-only one
// brings jobs forward too.
func (s *Store) Requeue(ctx context.Context, namespace, eventID string, force bool) (RequeueResult, error) {
	var result RequeueResult
	err := InTx(ctx, s.db, func(tx *Tx) error {
		var (
			status webhookevent.Status
			erased bool
		)
		// NOWAIT: a row locked now is being applied now (only an apply holds
		// a ledger row's lock for long, up to its timeout); that apply is the
		// pending work, and waiting for it would hold this requeue, and a
		// bulk requeue behind it, for as long.
		err := tx.QueryRowContext(ctx, `SELECT status, erased_at IS NOT NULL FROM webhook_event WHERE namespace = $1 AND event_id = $2 FOR UPDATE NOWAIT`,
			namespace, eventID).Scan(&status, &erased)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if isLockNotAvailable(err) {
			return errBeingApplied // the transaction is aborted: end it
		}
		if err != nil {
			return fmt.Errorf("lock %s/%s: %w", namespace, eventID, err)
		}
		actor := ActorRequeue
		if force && status == webhookevent.StatusSettled {
			actor = ActorForce
		}
		from := stateOf(string(status), erased)
		if _, err := step(actor, from); err != nil {
			return err
		}
		settled := from == StateSettled
		jobs0, err := jobsOf(ctx, tx, namespace, eventID)
		if err != nil {
			return err
		}
		// The job to bring forward: the event's own newest job, in whatever
		// state River keeps it, else an unfinished batch that holds it. A
		// settled event needs a forced job: any other skips it. A job of
		// its own running now will apply it (it has not reached the row,
		// whose lock this requeue holds) unless the row was discarded,
		// which that run may have passed by already; a running batch may
		// have passed it by too. Neither is the work that applies it.
		var bring *eventJob
		for i, j := range jobs0 {
			if settled && !j.forced {
				continue
			}
			if j.state == rivertype.JobStateRunning {
				if !j.batch && from != StateDiscarded {
					result = RequeuePending
					return nil
				}
				continue
			}
			if bring == nil || (bring.batch && !j.batch) {
				bring = &jobs0[i]
			}
		}
		if !settled {
			var changed bool
			err := tx.QueryRowContext(ctx, `UPDATE webhook_event e SET status = `+claimedSQL+`, settled_at = NULL, failures = 0, failing_since = NULL,
				discard_reason = NULL
				WHERE namespace = $1 AND event_id = $2 AND `+requeueGuard+` RETURNING true`, namespace, eventID).Scan(&changed)
			if err != nil {
				return fmt.Errorf("requeue %s/%s: %w", namespace, eventID, err)
			}
		}
		result = RequeueRequeued
		if bring != nil {
			// NOWAIT again: a job row locked now is being taken by an apply
			// that absorbs it (absorb.go) or by River's fetch, and will
			// apply the event; waiting for it while holding the event's
			// row would deadlock with that apply.
			err := lockJob(ctx, tx, bring.id)
			switch {
			case isLockNotAvailable(err):
				return errBeingApplied
			case errors.Is(err, sql.ErrNoRows):
				bring = nil // River pruned it meanwhile: a new job below
			case err != nil:
				return fmt.Errorf("lock job %d: %w", bring.id, err)
			}
		}
		if bring != nil {
			if _, err := s.jobs.JobRetryTx(ctx, tx.Tx, bring.id); err != nil {
				return fmt.Errorf("retry job %d: %w", bring.id, err)
			}
			// Attempt 0 and a whole budget, as a new job has: the requeue
			// follows a fix, its retries back off from a second again and
			// span RetryHorizon, and River UI counts the attempts from one.
			if err := renewAttempts(ctx, tx, bring.id); err != nil {
				return fmt.Errorf("renew the attempts of job %d: %w", bring.id, err)
			}
			return nil
		}
		if _, err := s.jobs.InsertTx(ctx, tx.Tx, ApplyArgs{Namespace: namespace, EventID: eventID, Force: settled}, nil); err != nil {
			return fmt.Errorf("enqueue apply of %s/%s: %w", namespace, eventID, err)
		}
		return nil
	})
	if errors.Is(err, errBeingApplied) {
		return RequeuePending, nil
	}
	return result, err
}

// requeueGuard is the lifecycle table's guard of a requeue's update.
var requeueGuard = keyedGuardSQL(ActorRequeue, "e")

// errBeingApplied ends a requeue whose row an apply holds right now.
var errBeingApplied = errors.New("event is being applied right now")

// RequeueCounts says what a bulk requeue did with each matching event.
type RequeueCounts struct {
	// Requeued events are applied now.
	Requeued int `json:"requeued"`
	// Pending events were being applied already by a running job.
	Pending int `json:"pending"`
	// Skipped events were left alone, for the reasons counted in Reasons.
	Skipped int            `json:"skipped"`
	Reasons map[string]int `json:"skipped_reasons,omitempty"`
}

func (c *RequeueCounts) skip(reason string) {
	c.Skipped++
	if c.Reasons == nil {
		c.Reasons = map[string]int{}
	}
	c.Reasons[reason]++
}

// RequeueMatching requeues every row f selects (f.Status should be failed,
// or settled with force), oldest first, each in a transaction of its own,
// and counts what happened to each. With dryRun it only counts them, as
// Requeued.
func (s *Store) RequeueMatching(ctx context.Context, f Filter, force, dryRun bool) (RequeueCounts, error) {
	var c RequeueCounts
	f.After, f.Limit = 0, 500
	for {
		rows, next, err := s.List(ctx, f)
		if err != nil {
			return c, err
		}
		for _, r := range rows {
			if dryRun {
				c.Requeued++
				continue
			}
			res, err := s.Requeue(ctx, r.Namespace, r.EventID, force)
			switch {
			case errors.Is(err, ErrSettled):
				c.skip("settled since it was listed (requeue with force to apply it again)")
			case errors.Is(err, ErrNotFound):
				c.skip("pruned since it was listed")
			case errors.Is(err, ErrErased):
				c.skip("erased: nothing left to apply")
			case err != nil:
				return c, err
			case res == RequeuePending:
				c.Pending++
			default:
				c.Requeued++
			}
		}
		if next == 0 {
			return c, nil
		}
		f.After = next
	}
}
