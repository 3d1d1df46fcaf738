package console

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
)

// eventRow is a ledger row as the events and failed pages list it, with
// what an operator needs beside it to act on a failure: the handler that
// failed, and when River tries it next.
type eventRow struct {
	*ent.WebhookEvent
	// FailedIn is the module and handler of the last failure of a failed or
	// discarded row ("subscription.Flush"); "" when none is named.
	FailedIn string
	// Unhandled marks a settled row no handler matched: settled with no
	// effect.
	Unhandled bool
	// Job is the event's newest apply job for a row that is still pending
	// (claimed, processing, failed); nil otherwise, or when River has none.
	Job *ledger.Job
	// Next says when the event is tried next (see nextTry).
	Next string
}

// rowsData is what the shared "rows" template shows.
type rowsData struct {
	Rows []eventRow
	// RiverUI is where River UI is served, "" when it is off: each row's
	// job links there.
	RiverUI string
}

// pendingStatus reports whether a row in status s still waits for River
// to apply it, so its apply job is worth reading.
func pendingStatus(s webhookevent.Status) bool {
	return s == webhookevent.StatusClaimed || s == webhookevent.StatusProcessing || s == webhookevent.StatusFailed
}

// listRows reads, for a page of rows, the apply job of each row still
// pending, all in one lookup (FindJobs), each as the event page and the
// admin API find an event's job: its own, or the batch it was claimed in.
// Settled and discarded rows ask for none.
func (h *handler) listRows(ctx context.Context, rows []*ent.WebhookEvent) (rowsData, error) {
	d := rowsData{Rows: make([]eventRow, len(rows)), RiverUI: h.cfg.RiverUI}
	var pending []ledger.EventKey
	for _, r := range rows {
		if pendingStatus(r.Status) {
			pending = append(pending, ledger.EventKey{Namespace: r.Namespace, EventID: r.EventID})
		}
	}
	jobs, err := h.cfg.Ledger.FindJobs(ctx, pending)
	if err != nil {
		return d, err
	}
	now := time.Now()
	for i, r := range rows {
		e := eventRow{WebhookEvent: r, Unhandled: unhandled(r)}
		if r.Status == webhookevent.StatusFailed || r.Status == webhookevent.StatusDiscarded {
			e.FailedIn = failingHandler(r)
		}
		if pendingStatus(r.Status) {
			e.Job = jobs[ledger.EventKey{Namespace: r.Namespace, EventID: r.EventID}]
		}
		e.Next = nextTry(r, e.Job, now)
		d.Rows[i] = e
	}
	return d, nil
}

// unhandled reports whether the row settled with no handler matching its
// type: handlers is [] (nil means it was never applied).
func unhandled(r *ent.WebhookEvent) bool {
	return r.Status == webhookevent.StatusSettled && r.Handlers != nil && len(r.Handlers) == 0
}

// handlerPrefix is the "module.handler: " that starts a handler failure's
// text, after the "gave up after N attempts: " of a last attempt.
var handlerPrefix = regexp.MustCompile(`^(?:gave up after \d+ attempts: )?([a-z][a-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*): `)

// failingHandler names the module and handler of the row's last failure:
// its failure log's newest entry, else the "module.handler:" that starts
// last_error; "" when neither names one (a failure that was not a
// handler's).
func failingHandler(r *ent.WebhookEvent) string {
	if n := len(r.FailureLog); n > 0 && r.FailureLog[n-1].Handler != "" {
		return r.FailureLog[n-1].Handler
	}
	if r.LastError != nil {
		if m := handlerPrefix.FindStringSubmatch(*r.LastError); m != nil {
			return m[1]
		}
	}
	return ""
}

// moduleOf is the module part of "module.handler".
func moduleOf(handler string) string {
	m, _, _ := strings.Cut(handler, ".")
	return m
}

// nextTry says when River applies the row next, from its apply job j: the
// next retry's time for a job that waits, or why there is none.
func nextTry(r *ent.WebhookEvent, j *ledger.Job, now time.Time) string {
	switch {
	case r.Status == webhookevent.StatusSettled:
		return "—"
	case r.Status == webhookevent.StatusDiscarded:
		return "none: discarded (requeue brings it back)"
	case j == nil:
		return "none: River has no job for it (requeue it)"
	}
	switch rivertype.JobState(j.State) {
	case rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStateRetryable, rivertype.JobStatePending:
		if j.ScheduledAt == nil {
			return "due now"
		}
		return fmt.Sprintf("%s (%s)", stamp(*j.ScheduledAt), until(*j.ScheduledAt, now))
	case rivertype.JobStateRunning:
		return "running now"
	case rivertype.JobStateCancelled:
		return "none: failed for good (River cancelled the job)"
	case rivertype.JobStateDiscarded:
		return fmt.Sprintf("none: River gave up after %d attempts", j.Attempt)
	case rivertype.JobStateCompleted:
		return "none: its job completed"
	}
	return j.State
}

// stamp prints t as the console prints every time.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// until is how far t is after now: "in 4s", or "due now" when it passed.
func until(t, now time.Time) string {
	if d := t.Sub(now); d > 0 {
		return "in " + duration(d)
	}
	return "due now"
}

// failureView is one entry of a row's failure history as the event page
// shows it.
type failureView struct {
	ledger.Failure
	Module string
}

// history is the row's failure log, newest first.
func history(r *ent.WebhookEvent) []failureView {
	out := make([]failureView, len(r.FailureLog))
	for i, f := range r.FailureLog {
		out[len(out)-1-i] = failureView{Failure: f, Module: moduleOf(f.Handler)}
	}
	return out
}

// handlersText says which modules applied the row: their names, "none
// matched: unhandled" for [], and none yet before an apply committed.
func handlersText(r *ent.WebhookEvent) string {
	switch {
	case r.Handlers == nil && r.Status == webhookevent.StatusSettled:
		return "not recorded"
	case r.Handlers == nil:
		return "none yet: no apply has committed"
	case len(r.Handlers) == 0:
		return "none matched: unhandled (settled with no effect)"
	}
	return strings.Join(r.Handlers, ", ")
}
