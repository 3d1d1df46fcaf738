package ledger

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The lifecycle of an event: every path that changes a ledger row is an
// Actor of Lifecycle, the one transition table. An actor's statement names
// the states it may act on with guardSQL (checked by PostgreSQL under the
// row's lock), and an actor that reads a row first checks it with step;
// both come from the table, so no path can move a row the table does not
// allow. docs/failures.md shows the table (LifecycleMarkdown), and the
// lifecycle model test (lifecycle_model_test.go) drives the actors
// together and checks the rows against it after every step.

// State is where an event is: a ledger status, or one of the two states
// beyond the statuses: erased (a settled or discarded row whose payload
// erase replaced) and pruned (the row deleted, its dedup keys kept).
type State string

// The states. StateNone is no row: where a claim starts.
const (
	StateNone       State = "none"
	StateClaimed    State = "claimed"
	StateProcessing State = "processing"
	StateSettled    State = "settled"
	StateFailed     State = "failed"
	StateDiscarded  State = "discarded"
	StateErased     State = "erased"
	StatePruned     State = "pruned"
)

// stateOf is the state of a row with status and the erased mark.
func stateOf(status string, erased bool) State {
	if erased {
		return StateErased
	}
	return State(status)
}

// Actor is a path that changes an event.
type Actor string

// The actors.
const (
	ActorClaim         Actor = "claim"
	ActorApplied       Actor = "apply succeeded"
	ActorApplyFailed   Actor = "apply failed, will retry"
	ActorPermanent     Actor = "apply failed permanently"
	ActorGaveUp        Actor = "apply failed, River gave up"
	ActorRequeue       Actor = "requeue"
	ActorForce         Actor = "forced re-apply"
	ActorForceFailed   Actor = "forced re-apply failed"
	ActorDiscard       Actor = "discard"
	ActorErase         Actor = "erase"
	ActorLogOnly       Actor = "duplicate under log-only"
	ActorReplay        Actor = "replay, drift repair"
	ActorPrune         Actor = "prune"
	ActorRiverStopped  Actor = "River stopped the job (River UI Cancel, the rescuer gave up)"
	ActorRiverLost     Actor = "the job is gone (River UI Delete, lost)"
	ActorRiverRetry    Actor = "River UI Retry"
	ActorOutage        Actor = "database outage, shutdown"
	ActorDuplicateSeen Actor = "duplicate"
)

// Transition is one row of the table: what an actor does to an event in
// one of the From states, and the River job that goes with it.
type Transition struct {
	Actor Actor
	From  []State
	// To is the state the event is in afterwards; empty when it stays.
	To State
	// Job is the River apply job that goes with the new state.
	Job string
	// By is who or what acts.
	By string
}

// Lifecycle is the transition table. An actor may act on an event only in
// a From state of one of its rows; anywhere else it refuses (refusal).
var Lifecycle = []Transition{
	{ActorClaim, []State{StateNone}, StateClaimed, "one apply job, inserted with the row", "a verified delivery"},
	{ActorDuplicateSeen, []State{StateClaimed, StateProcessing, StateSettled, StateFailed, StateDiscarded, StateErased, StatePruned}, "", "none", "a delivery of a known event (answered duplicate)"},
	{ActorReplay, []State{StateNone}, StateClaimed, "one apply job, inserted with the row", "`replay`, `drift --fix`, the subscription re-fetch (a known event is a duplicate)"},
	{ActorApplied, []State{StateClaimed, StateFailed}, StateSettled, "completed in the apply's transaction", "an apply job"},
	{ActorApplyFailed, []State{StateClaimed, StateFailed}, StateFailed, "retryable, the error in its errors", "an apply job"},
	{ActorPermanent, []State{StateClaimed, StateFailed}, StateFailed, "cancelled", "an apply job (`ledger.Permanent`)"},
	{ActorGaveUp, []State{StateClaimed, StateFailed}, StateFailed, "discarded", "an apply job on its last attempt"},
	{ActorOutage, []State{StateClaimed, StateFailed, StateSettled}, "", "snoozed (not an attempt), or handed back", "an apply job"},
	{ActorRequeue, []State{StateClaimed, StateFailed, StateDiscarded}, StateClaimed, "its job brought forward with attempt 0, else a new one", "`events requeue`, the admin API, the console"},
	{ActorForce, []State{StateSettled}, "", "a forced job of its own", "`events requeue --force`"},
	{ActorForceFailed, []State{StateSettled}, "", "retryable; the failure kept in the row's history", "a forced job"},
	{ActorLogOnly, []State{StateSettled}, "", "a forced job of its own", "a duplicate under `CLAIM_MODE=log-only`"},
	{ActorLogOnly, []State{StateClaimed, StateFailed, StateDiscarded, StateErased, StatePruned}, "", "none: its own job applies it, or nothing does", "a duplicate under `CLAIM_MODE=log-only`"},
	{ActorDiscard, []State{StateClaimed, StateFailed, StateDiscarded}, StateDiscarded, "its own jobs cancelled; a batch skips it", "`events discard`, the admin API, the console"},
	{ActorErase, []State{StateSettled, StateDiscarded}, StateErased, "none left to run", "`erase --subject`"},
	{ActorPrune, []State{StateSettled, StateErased}, StatePruned, "none left to run", "`prune`, the hourly prune job (rows once settled: a discarded one, erased or not, is kept)"},
	{ActorRiverStopped, []State{StateClaimed, StateProcessing}, StateFailed, "cancelled or discarded; the reason names it", "the ledger's sweep"},
	{ActorRiverLost, []State{StateClaimed, StateProcessing}, StateClaimed, "a new apply job", "the ledger's sweep"},
	{ActorRiverRetry, []State{StateClaimed, StateFailed, StateSettled}, "", "run again; a settled row is skipped", "River UI"},
}

// Refusals name the error an actor gives in a state it may not act on;
// any other refusal is a TransitionError of its own.
var refusals = []struct {
	Actor Actor
	From  State
	Err   error
}{
	{ActorRequeue, StateSettled, ErrSettled},
	{ActorRequeue, StateErased, ErrErased},
	{ActorForce, StateErased, ErrErased},
	{ActorForce, StateDiscarded, ErrDiscarded},
	{ActorDiscard, StateSettled, ErrNotDiscardable},
	{ActorDiscard, StateErased, ErrNotDiscardable},
	{ActorErase, StateClaimed, ErrNotSettled},
	{ActorErase, StateFailed, ErrNotSettled},
}

// ErrDiscarded is returned when forcing a re-apply of a discarded event:
// requeue it (without force) to apply it.
var ErrDiscarded = errors.New("event is discarded; requeue it without force to apply it")

// ErrNotSettled is returned when erasing an event still to be applied:
// settle or discard it first.
var ErrNotSettled = errors.New("event is still to be applied; settle or discard it first")

// TransitionError is an actor's refusal of an event in a state the
// lifecycle table does not let it act on. It matches the named error of
// that refusal with errors.Is (ErrSettled, ErrNotDiscardable ...).
type TransitionError struct {
	Actor Actor
	From  State
	err   error
}

func (e *TransitionError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("%s is not allowed on a %s event", e.Actor, e.From)
}

func (e *TransitionError) Unwrap() error { return e.err }

// step is the state actor moves an event in state from to, or the
// table's refusal.
func step(actor Actor, from State) (State, error) {
	for _, t := range Lifecycle {
		if t.Actor == actor && slices.Contains(t.From, from) {
			if t.To == "" {
				return from, nil
			}
			return t.To, nil
		}
	}
	for _, r := range refusals {
		if r.Actor == actor && r.From == from {
			return "", &TransitionError{Actor: actor, From: from, err: r.Err}
		}
	}
	return "", &TransitionError{Actor: actor, From: from}
}

// mayAct reports whether actor may act on an event in state from.
func mayAct(actor Actor, from State) bool {
	_, err := step(actor, from)
	return err == nil
}

// fromStates is every state actor may act on, in the table's order.
func fromStates(actor Actor) []State {
	var out []State
	for _, t := range Lifecycle {
		if t.Actor != actor {
			continue
		}
		for _, s := range t.From {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// guardSQL is the condition, on the ledger row aliased alias, that the row
// is in a state actor may act on: an actor's UPDATE carries it in its
// WHERE, which PostgreSQL evaluates again on the row's newest version
// once it holds the row's lock, so a row another path moved meanwhile is
// left alone, and the statement's RETURNING is what it changed.
func guardSQL(actor Actor, alias string) string {
	return guardOn(actor, alias, alias+".status")
}

// keyedGuardSQL is guardSQL for a statement that reaches its rows by key:
// its status is read through an expression, so that the planner can never
// take the guard for the predicate of the partial index of claimed and
// failed rows and walk that index (every pending row) instead of probing
// the unique index by key.
func keyedGuardSQL(actor Actor, alias string) string {
	return guardOn(actor, alias, "("+alias+".status || '')")
}

// guardOn is guardSQL with the row's status read as status.
func guardOn(actor Actor, alias, status string) string {
	col := func(c string) string { return alias + "." + c }
	var statuses []string
	erased := false
	for _, s := range fromStates(actor) {
		switch s {
		case StateErased:
			erased = true
		case StateNone, StatePruned:
		default:
			statuses = append(statuses, "'"+string(s)+"'")
		}
	}
	var parts []string
	if len(statuses) > 0 {
		parts = append(parts, "("+status+" IN ("+strings.Join(statuses, ", ")+") AND "+col("erased_at")+" IS NULL)")
	}
	if erased {
		parts = append(parts, col("erased_at")+" IS NOT NULL")
	}
	if len(parts) == 0 {
		return "false"
	}
	return "(" + strings.Join(parts, " OR ") + ")"
}

// JobRule says which River apply jobs may carry an event in a state: the
// live ones (available, scheduled, retryable, pending or running) among
// its own jobs and the unfinished batches that hold it. The lifecycle
// model test and the sweep check rows against it.
type JobRule struct {
	State State
	// MinLive and MaxLive bound the live jobs that will still apply the
	// event (not counting a running one that already passed it); a
	// negative MaxLive is no bound.
	MinLive, MaxLive int
	Says             string
}

// JobRules is the River side of the table, per state.
var JobRules = []JobRule{
	{StateClaimed, 1, 1, "exactly one live job will apply it"},
	{StateProcessing, 1, 1, "its running job (inside the apply's transaction only)"},
	{StateFailed, 0, 1, "a retry pending, or none: failed for good, River gave up, or its job was stopped in River"},
	{StateSettled, 0, -1, "none, or forced re-applies (a forced requeue, each duplicate under log-only); any other finds it settled and skips it"},
	{StateDiscarded, 0, 0, "none of its own; a batch that holds it skips it"},
	{StateErased, 0, 0, "none"},
	{StatePruned, 0, 0, "none"},
}

// LifecycleMarkdown renders the table as docs/failures.md shows it.
func LifecycleMarkdown() string {
	var b strings.Builder
	b.WriteString("| actor | from | to | the River job | by |\n|---|---|---|---|---|\n")
	for _, t := range Lifecycle {
		from := make([]string, len(t.From))
		for i, s := range t.From {
			from[i] = "`" + string(s) + "`"
		}
		to := "unchanged"
		if t.To != "" {
			to = "`" + string(t.To) + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", t.Actor, strings.Join(from, ", "), to, t.Job, t.By)
	}
	b.WriteString("\n| state | live apply jobs | |\n|---|---|---|\n")
	for _, r := range JobRules {
		n := fmt.Sprintf("%d", r.MinLive)
		switch {
		case r.MaxLive < 0:
			n = fmt.Sprintf("%d or more", r.MinLive)
		case r.MaxLive != r.MinLive:
			n = fmt.Sprintf("%d or %d", r.MinLive, r.MaxLive)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.State, n, r.Says)
	}
	b.WriteString("\nAnything else is refused with a named error:\n\n")
	for _, r := range refusals {
		a := "a"
		if strings.ContainsRune("aeiou", rune(r.From[0])) {
			a = "an"
		}
		fmt.Fprintf(&b, "- %s of %s `%s` event: %s\n", r.Actor, a, r.From, r.Err)
	}
	return b.String()
}
