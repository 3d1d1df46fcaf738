package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/riverqueue/river"

	"github.com/hookledger/hookledger/ent"
)

// PrepareFunc reads what an event's handlers need from another service
// (a provider's API), before the event's apply transaction and outside
// any lock, and returns ctx carrying it for them. client reads the
// database (no transaction). Its error is the event's failure, as a
// handler's would be: recorded on the row and retried, or, wrapped with
// Permanent, failed for good.
type PrepareFunc func(ctx context.Context, client *ent.Client, ev *Event) (context.Context, error)

// preparer is a registered PrepareFunc and the types it prepares.
type preparer struct {
	provider, pattern string
	family            bool
	fn                PrepareFunc
	name              string
}

// Prepare registers fn for provider's events of type pattern (as Handle
// matches them). An event with a preparer is applied in a job of its
// own: a batch that holds it gives it one, in its transaction, and
// applies the others without it; its own job runs fn before it begins
// its transaction, so that no ledger row is locked while fn waits on
// another service.
func (r *Registry) Prepare(provider, pattern string, fn PrepareFunc) {
	_, name := funcName(fn)
	prefix, family, err := typePattern("preparer", provider, pattern)
	if err != nil {
		r.errs = append(r.errs, err)
		return
	}
	r.preparers = append(r.preparers, preparer{provider: provider, pattern: prefix, family: family, fn: fn, name: name})
}

// preparerOf returns the preparer of provider's eventType, if any.
func (r *Registry) preparerOf(provider, eventType string) (preparer, bool) {
	for _, p := range r.preparers {
		if p.provider == provider && (p.family && strings.HasPrefix(eventType, p.pattern) || !p.family && eventType == p.pattern) {
			return p, true
		}
	}
	return preparer{}, false
}

// prepare runs the preparer of a job's one event before its transaction,
// and returns the context its handlers run in. An event that is not to be
// applied (settled, unless forced; discarded, erased or gone) or has no
// preparer is left to the transaction, which finds it so.
func (r *applyRun) prepare(ctx context.Context) (context.Context, error) {
	if len(r.own) != 1 || len(r.a.Registry.preparers) == 0 {
		return ctx, nil
	}
	k := r.own[0]
	var (
		ev         = &Event{Namespace: k.Namespace, EventID: k.EventID}
		payload    []byte
		occurredAt sql.NullTime
		status     string
		attempts   int
		erased     bool
	)
	// The type first: nearly every event has no preparer, and its payload,
	// which the claim may have kept for the apply, is not read here.
	err := r.a.DB.QueryRowContext(ctx, `
		SELECT provider, source, event_type, occurred_at, replayed, status, attempts, erased_at IS NOT NULL
		FROM webhook_event WHERE namespace = $1 AND event_id = $2`, k.Namespace, k.EventID).
		Scan(&ev.Provider, &ev.Source, &ev.Type, &occurredAt, &ev.Replayed, &status, &attempts, &erased)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ctx, nil
	case err != nil:
		return ctx, &dbError{fmt.Errorf("read %s/%s to prepare it: %w", k.Namespace, k.EventID, err)}
	}
	p, ok := r.a.Registry.preparerOf(ev.Provider, ev.Type)
	state := stateOf(status, erased)
	settled := state == StateSettled
	if !ok || !mayAct(ActorApplied, state) && !(r.force && mayAct(ActorForce, state)) {
		return ctx, nil
	}
	err = r.a.DB.QueryRowContext(ctx, `SELECT payload FROM webhook_event WHERE namespace = $1 AND event_id = $2`, k.Namespace, k.EventID).Scan(&payload)
	if err != nil {
		return ctx, &dbError{fmt.Errorf("read %s/%s to prepare it: %w", k.Namespace, k.EventID, err)}
	}
	ev.OccurredAt, ev.Forced = occurredAt.Time, r.force && settled
	opened, err := r.a.Sealer.Open(k, payload)
	if err == nil {
		ev.Payload = opened
		ctx, err = runPrepare(ctx, p, entClient(r.a.DB), ev)
	}
	if err != nil {
		// The event's failure, as its handler's would be.
		r.at, r.ev = Attempt{Key: k, Seen: attempts}, ev
		return ctx, err
	}
	r.prepared = k
	return ctx, nil
}

// runPrepare runs p's PrepareFunc as runHandler runs a handler: a panic
// is the event's failure, and the error is named after the function.
func runPrepare(ctx context.Context, p preparer, client *ent.Client, ev *Event) (out context.Context, err error) {
	out = ctx
	herr := runHandler(ctx, nil, func(ctx context.Context, _ *Tx, ev *Event) error {
		pctx, err := p.fn(ctx, client, ev)
		if err == nil {
			out = pctx
		}
		return err
	}, ev)
	if herr != nil {
		return ctx, &HandlerError{Handler: p.name, Err: herr}
	}
	return out, nil
}

// setAside takes the events that have a preparer out of a batch of more
// than one, and gives each an apply job of its own, in the transaction:
// the batch applies the others without waiting for their preparation.
// The job's own event, prepared before the transaction, stays.
func (r *applyRun) setAside(ctx context.Context, tx *Tx) error {
	if len(r.keys) < 2 || len(r.a.Registry.preparers) == 0 {
		return nil
	}
	namespaces, ids := make([]string, len(r.keys)), make([]string, len(r.keys))
	for i, k := range r.keys {
		namespaces[i], ids[i] = k.Namespace, k.EventID
	}
	rows, err := tx.QueryContext(ctx, `SELECT namespace, event_id, provider, event_type FROM webhook_event
		WHERE (namespace, event_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, namespaces, ids)
	if err != nil {
		return &dbError{fmt.Errorf("read the types of %d event(s): %w", len(r.keys), err)}
	}
	defer rows.Close()
	aside := map[EventKey]bool{}
	for rows.Next() {
		var k EventKey
		var provider, eventType string
		if err := rows.Scan(&k.Namespace, &k.EventID, &provider, &eventType); err != nil {
			return &dbError{err}
		}
		if _, ok := r.a.Registry.preparerOf(provider, eventType); ok && k != r.prepared {
			aside[k] = true
		}
	}
	if err := rows.Err(); err != nil {
		return &dbError{err}
	}
	if len(aside) == 0 {
		return nil
	}
	keys := make([]EventKey, 0, len(r.keys)-len(aside))
	params := make([]river.InsertManyParams, 0, len(aside))
	for _, k := range r.keys {
		if aside[k] {
			params = append(params, river.InsertManyParams{Args: ApplyArgs{Namespace: k.Namespace, EventID: k.EventID, Force: r.force}})
			continue
		}
		keys = append(keys, k)
	}
	r.keys = keys
	if err := tx.InsertJobs(ctx, params); err != nil {
		return &dbError{err}
	}
	return nil
}
