package failure

import (
	"context"
	"errors"
	"strings"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// Outcome is what an action did to one event of a group.
type Outcome struct {
	Namespace string `json:"namespace"`
	EventID   string `json:"event_id"`
	// Result is requeued, pending (an apply holds it right now: nothing
	// changed), discarded, or skipped.
	Result string `json:"result"`
	// Reason says why an event was skipped.
	Reason string `json:"reason,omitempty"`
}

// Result is what an action did to a group, event by event.
type Result struct {
	Group string `json:"group"`
	// Counts are the events by Outcome.Result.
	Counts map[string]int `json:"counts"`
	Events []Outcome      `json:"events"`
}

func (r *Result) add(o Outcome) {
	r.Events = append(r.Events, o)
	r.Counts[o.Result]++
}

// Requeue requeues each event of keys through the ledger's Requeue, as
// hookledger events requeue does one: back to claimed, its apply job run
// now. An event that changed since the group was read is skipped with the
// ledger's reason.
func (g *Groups) Requeue(ctx context.Context, id string, keys []ledger.EventKey) (Result, error) {
	r := Result{Group: id, Counts: map[string]int{}, Events: []Outcome{}}
	for _, k := range keys {
		o := Outcome{Namespace: k.Namespace, EventID: k.EventID}
		res, err := g.ledger.Requeue(ctx, k.Namespace, k.EventID, false)
		switch {
		case err == nil:
			o.Result = string(res)
		case skippable(err):
			o.Result, o.Reason = "skipped", err.Error()
		default:
			return r, err
		}
		r.add(o)
	}
	return r, nil
}

// Discard discards each event of keys with reason through the ledger's
// Discard, as hookledger events discard does one. An event that settled
// since, or that an apply holds right now, is skipped with the ledger's
// reason. A blank reason is ledger.ErrNoReason, before any event.
func (g *Groups) Discard(ctx context.Context, id string, keys []ledger.EventKey, reason string) (Result, error) {
	r := Result{Group: id, Counts: map[string]int{}, Events: []Outcome{}}
	if strings.TrimSpace(reason) == "" {
		return r, ledger.ErrNoReason
	}
	for _, k := range keys {
		o := Outcome{Namespace: k.Namespace, EventID: k.EventID, Result: "discarded"}
		_, err := g.ledger.Discard(ctx, k.Namespace, k.EventID, reason)
		switch {
		case err == nil:
		case skippable(err):
			o.Result, o.Reason = "skipped", err.Error()
		default:
			return r, err
		}
		r.add(o)
	}
	return r, nil
}

// skippable are the ledger's refusals of one event, which leave the rest
// of a group to act on.
func skippable(err error) bool {
	var refused *ledger.TransitionError
	return errors.As(err, &refused) || errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrBeingApplied)
}
