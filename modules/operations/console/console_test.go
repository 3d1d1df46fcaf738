package console

import (
	"bytes"
	"fmt"
	"html/template"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
)

// TestPagesCallOnlyDefinedTemplates: every page parses with the shared
// templates, and a page calling a template nobody defines is caught when
// the pages are parsed, not when the page is shown.
func TestPagesCallOnlyDefinedTemplates(t *testing.T) {
	t.Parallel()
	pages := parsePages()
	require.Len(t, pages, len(pageNames))
	for name, p := range pages {
		require.Empty(t, undefinedCalls(p), name)
	}
	for _, name := range []string{"events", "failed"} {
		require.NotNil(t, pages[name].Lookup("rows"), "%s has the shared event table", name)
	}

	broken := template.Must(template.New("layout.html").Parse(
		`{{define "content"}}{{if .}}{{range .}}{{template "rows" .}}{{end}}{{else}}{{template "nowhere"}}{{end}}{{end}}{{template "content" .}}`))
	require.Equal(t, []string{"nowhere", "rows"}, undefinedCalls(broken))
}

func row(id string, status webhookevent.Status) *ent.WebhookEvent {
	msg := "subscription.applyStripe: ERROR: new row violates check constraint"
	r := &ent.WebhookEvent{Namespace: "stripe", EventID: id, Source: "stripe", Provider: "stripe",
		EventType: "customer.subscription.updated", Status: status, Attempts: 1, ReceivedAt: time.Unix(1_800_000_000, 0)}
	if status == webhookevent.StatusFailed {
		r.LastError = &msg
	}
	return r
}

// rows is the table data of rs, as listRows builds it without River jobs.
func rows(rs ...*ent.WebhookEvent) rowsData {
	d := rowsData{RiverUI: "/riverui"}
	for _, r := range rs {
		d.Rows = append(d.Rows, eventRow{WebhookEvent: r, Unhandled: unhandled(r), FailedIn: failingHandler(r), Next: nextTry(r, nil, time.Now())})
	}
	return d
}

// TestListPagesRender: the events and failed pages render the shared
// table with no row, one row and a full page with a next link, each row
// linking to its event whatever its id holds.
func TestListPagesRender(t *testing.T) {
	t.Parallel()
	h := &handler{pages: parsePages(), cfg: Config{CSRFToken: "tok", CSRFField: "csrf_token"}}
	exec := func(name string, data any) string {
		var buf bytes.Buffer
		require.NoError(t, h.pages[name].Execute(&buf, page{Title: name, Nav: name, Data: data}), name)
		return buf.String()
	}

	out := exec("failed", failedData{})
	require.Contains(t, out, `<small id="failed-total">0</small>`)
	require.Contains(t, out, "No events.")
	require.NotContains(t, out, `id="bulk"`, "nothing to requeue")

	out = exec("failed", failedData{Events: rows(row("evt_a&b/c?d#e", webhookevent.StatusFailed)), Total: 1})
	require.Contains(t, out, `<small id="failed-total">1</small>`)
	require.Contains(t, out, `href="/console/event?namespace=stripe&amp;id=evt_a%26b%2fc%3fd%23e"`)
	require.Contains(t, out, ">evt_a&amp;b/c?d#e</a>")
	require.Contains(t, out, "violates check constraint")
	require.Contains(t, out, `href="/console/failed/confirm"`)
	require.NotContains(t, out, "No events.")

	var many []*ent.WebhookEvent
	for i := range pageSize {
		many = append(many, row(fmt.Sprintf("evt_many_%02d", i), webhookevent.StatusFailed))
	}
	out = exec("failed", failedData{Events: rows(many...), Total: pageSize + 7, Next: "/console/failed?after=42"})
	require.Equal(t, pageSize, strings.Count(out, `<tr class="status-failed">`))
	require.Contains(t, out, `<a id="next" href="/console/failed?after=42">`)
	require.Contains(t, out, "Requeue all 57 failed events")

	out = exec("events", eventsData{Events: rows(row("evt_ok", webhookevent.StatusSettled)), Next: "/console/events?after=7"})
	require.Contains(t, out, `<tr class="status-settled">`)
	require.Contains(t, out, `href="/console/event?namespace=stripe&amp;id=evt_ok"`)
	require.Contains(t, out, `<a id="next" href="/console/events?after=7">`)

	require.Contains(t, exec("confirm", 3), `<strong id="confirm-count">3</strong>`)
	require.Contains(t, exec("done", ledger.RequeueCounts{Requeued: 3}), "<strong>3</strong> requeued")
}

// TestFailureViews: the handler that failed comes from the failure log,
// else from last_error's "module.handler:" prefix; the next try reads the
// apply job's state; handlers tell unhandled from never applied.
func TestFailureViews(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	r := row("evt_f", webhookevent.StatusFailed)
	require.Equal(t, "subscription.applyStripe", failingHandler(r), "from last_error")
	gaveUp := "gave up after 84 attempts: payment.stripeChargeRefunded: upstream 503"
	r.LastError = &gaveUp
	require.Equal(t, "payment.stripeChargeRefunded", failingHandler(r))
	r.FailureLog = []ledger.Failure{{Attempt: 1, Handler: "usage.apply", Error: "x"}, {Attempt: 2, Handler: "subscription.Flush", Error: "y"}}
	require.Equal(t, "subscription.Flush", failingHandler(r), "the newest failure log entry wins")
	require.Equal(t, "subscription", moduleOf(failingHandler(r)))
	outage := "lock stripe/evt_f: connection refused"
	plain := row("evt_g", webhookevent.StatusFailed)
	plain.LastError = &outage
	require.Empty(t, failingHandler(plain), "not a handler's failure")

	h := history(r)
	require.Equal(t, []int{2, 1}, []int{h[0].Attempt, h[1].Attempt}, "newest first")
	require.Equal(t, "subscription", h[0].Module)

	at := now.Add(4 * time.Second)
	for _, c := range []struct {
		status webhookevent.Status
		job    *ledger.Job
		want   string
	}{
		{webhookevent.StatusFailed, &ledger.Job{State: "retryable", Attempt: 2, ScheduledAt: &at}, "2026-12-03 12:00:04Z (in 4s)"},
		{webhookevent.StatusFailed, &ledger.Job{State: "retryable", ScheduledAt: &now}, "2026-12-03 12:00:00Z (due now)"},
		{webhookevent.StatusClaimed, &ledger.Job{State: "available"}, "due now"},
		{webhookevent.StatusFailed, &ledger.Job{State: "running"}, "running now"},
		{webhookevent.StatusFailed, &ledger.Job{State: "cancelled"}, "none: failed for good (River cancelled the job)"},
		{webhookevent.StatusFailed, &ledger.Job{State: "discarded", Attempt: 84}, "none: River gave up after 84 attempts"},
		{webhookevent.StatusFailed, nil, "none: River has no job for it (requeue it)"},
		{webhookevent.StatusDiscarded, &ledger.Job{State: "cancelled"}, "none: discarded (requeue brings it back)"},
		{webhookevent.StatusSettled, nil, "—"},
	} {
		require.Equal(t, c.want, nextTry(row("x", c.status), c.job, now), "%s %+v", c.status, c.job)
	}

	settled := row("evt_s", webhookevent.StatusSettled)
	require.Equal(t, "not recorded", handlersText(settled))
	require.False(t, unhandled(settled), "nil: not recorded, not unhandled")
	settled.Handlers = []string{}
	require.True(t, unhandled(settled))
	require.Equal(t, "none matched: unhandled (settled with no effect)", handlersText(settled))
	settled.Handlers = []string{"subscription", "usage"}
	require.False(t, unhandled(settled))
	require.Equal(t, "subscription, usage", handlersText(settled))
	require.Equal(t, "none yet: no apply has committed", handlersText(row("evt_c", webhookevent.StatusClaimed)))
}

// TestRowsShowFailuresAndDiscards: a failed row names the handler that
// failed, its next retry and its job; an unhandled row is marked; a
// discarded row shows its reason.
func TestRowsShowFailuresAndDiscards(t *testing.T) {
	t.Parallel()
	h := &handler{pages: parsePages()}
	now := time.Now()
	at := now.Add(time.Minute)
	failed := eventRow{WebhookEvent: row("evt_failed", webhookevent.StatusFailed), FailedIn: "subscription.Flush",
		Job: &ledger.Job{ID: 77, State: "retryable", Attempt: 3, MaxAttempts: 84, ScheduledAt: &at}}
	failed.Next = nextTry(failed.WebhookEvent, failed.Job, now)
	unhandledRow := row("evt_unhandled", webhookevent.StatusSettled)
	unhandledRow.Handlers = []string{}
	discarded := row("evt_discarded", webhookevent.StatusDiscarded)
	reason := "customer <deleted> in 2025"
	discarded.DiscardReason = &reason
	d := rowsData{RiverUI: "/riverui", Rows: []eventRow{
		failed,
		{WebhookEvent: unhandledRow, Unhandled: true},
		{WebhookEvent: discarded, Next: nextTry(discarded, nil, time.Now())},
	}}
	var buf bytes.Buffer
	require.NoError(t, h.pages["events"].Execute(&buf, page{Data: eventsData{Events: d}}))
	out := buf.String()
	require.Contains(t, out, `<td class="failed-in"><code>subscription.Flush</code></td>`)
	require.Contains(t, out, stamp(at)+" (in 1m0s)")
	require.Contains(t, out, `<a href="/riverui/jobs/77">job #77</a>`)
	require.Contains(t, out, `settled · <span class="tag unhandled">unhandled</span>`)
	require.Contains(t, out, `<div class="reason">discarded: customer &lt;deleted&gt; in 2025</div>`)
	require.Contains(t, out, "none: discarded (requeue brings it back)")
	require.Contains(t, out, `<option>discarded</option>`, "the status filter offers discarded")
}

// TestEventPageActions: Discard is offered with a required reason for an
// event not yet settled or discarded; a discarded event shows its reason
// and keeps Requeue; the failure history is newest first.
func TestEventPageActions(t *testing.T) {
	t.Parallel()
	h := &handler{pages: parsePages()}
	exec := func(d eventData) string {
		var buf bytes.Buffer
		require.NoError(t, h.pages["event"].Execute(&buf, page{Data: d, RiverUI: "/riverui", Field: "csrf_token", CSRF: "tok"}))
		return buf.String()
	}
	failed := row("evt_f", webhookevent.StatusFailed)
	failed.FailureLog = []ledger.Failure{
		{Attempt: 1, JobID: 5, At: time.Unix(1_800_000_000, 0), Handler: "subscription.Flush", Error: "error-one"},
		{Attempt: 2, JobID: 5, At: time.Unix(1_800_000_002, 0), Handler: "subscription.Flush", Error: "error-two"},
	}
	out := exec(eventData{Row: failed, History: history(failed), FailedIn: "subscription.Flush", Module: "subscription", Discardable: true,
		Job: &ledger.Job{ID: 5, State: "retryable", Attempt: 2, MaxAttempts: 84}, Next: "soon", Handlers: handlersText(failed)})
	require.Contains(t, out, `action="/console/event/discard"`)
	require.Contains(t, out, `<input id="reason" name="reason" required`)
	require.Contains(t, out, `<button id="requeue">`)
	require.Contains(t, out, `<span id="job-attempt">2 / 84</span>`)
	require.Contains(t, out, `<td id="failed-in"><code>subscription.Flush</code> (module <strong>subscription</strong>)</td>`)
	require.Less(t, strings.Index(out, "error-two"), strings.Index(out, "error-one"), "newest first")
	require.Contains(t, out, `<a href="/riverui/jobs/5">#5</a>`)

	discarded := row("evt_d", webhookevent.StatusDiscarded)
	reason := "poison"
	discarded.DiscardReason = &reason
	out = exec(eventData{Row: discarded, Done: "discarded"})
	require.Contains(t, out, `<td id="discard-reason">poison</td>`)
	require.Contains(t, out, `<button id="requeue">`, "requeue brings it back")
	require.NotContains(t, out, `id="discard"`)
	require.Contains(t, out, "Discarded: the event left the backlog")
	require.Contains(t, out, "No failure recorded.")

	out = exec(eventData{Row: row("evt_s", webhookevent.StatusSettled), Error: "Not discarded: the event is settled, it was applied."})
	require.NotContains(t, out, `id="discard"`)
	require.Contains(t, out, `<button id="force">`)
	require.Contains(t, out, `<p class="error" id="error">Not discarded: the event is settled, it was applied.</p>`)
}

// TestSecretUsesFromTallies: the day's secret tallies name each configured
// secret at its position, used or not; one secret's tallies at several
// positions (it moved in a rotation) are one; a fingerprint no longer
// configured is retired, at the first position it matched at; deliveries
// without a fingerprint are known by their position alone; those not
// configured follow the configured ones by position.
func TestSecretUsesFromTallies(t *testing.T) {
	t.Parallel()
	at := func(min int) time.Time { return time.Date(2026, 12, 3, 12, min, 0, 0, time.UTC) }
	var matched []secretUse
	for _, outcome := range []struct {
		name  string
		count int64
		last  time.Time
	}{
		{ledger.SecretOutcome(1, "fp_a"), 3, at(5)}, {ledger.SecretOutcome(0, "fp_a"), 2, at(9)},
		{ledger.SecretOutcome(2, "fp_old"), 1, at(1)}, {ledger.SecretOutcome(1, "fp_old"), 4, at(2)},
		{ledger.SecretOutcome(0, ""), 6, at(3)}, {ledger.SecretOutcome(1, ""), 1, at(4)},
		{"claimed", 99, at(9)}, {"secret:x:fp", 1, at(9)},
	} {
		if i, fp, ok := ledger.SecretTally(outcome.name); ok {
			matched = append(matched, secretUse{Index: i, Fingerprint: fp, Count: outcome.count, Last: outcome.last})
		}
	}
	require.Len(t, matched, 6, "only the secret tallies are read as such")
	require.Equal(t, []secretUse{
		{Index: 0, Fingerprint: "fp_b"},
		{Index: 1, Fingerprint: "fp_a", Count: 5, Last: at(9)},
		{Index: 0, Count: 6, Last: at(3), Unnamed: true},
		{Index: 1, Fingerprint: "fp_old", Count: 5, Last: at(2), Retired: true},
		{Index: 1, Count: 1, Last: at(4), Unnamed: true},
	}, secretUses([]string{"fp_b", "fp_a"}, matched))
}
