package app_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/operations/admin"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// applyJob is an event's own apply job as River keeps it.
type applyJob struct {
	ID, Attempt, MaxAttempts int64
	State                    string
	ScheduledAt              time.Time
}

// jobOf reads the apply job of event id; it requires exactly one.
func jobOf(t *testing.T, s *server, id string) applyJob {
	t.Helper()
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event' AND args->>'event_id' = $1`, id),
		"one apply job for %s", id)
	var j applyJob
	require.NoError(t, s.db.SQL.QueryRow(`SELECT id, attempt, max_attempts, state, scheduled_at FROM river_job
		WHERE kind = 'apply_event' AND args->>'event_id' = $1`, id).Scan(&j.ID, &j.Attempt, &j.MaxAttempts, &j.State, &j.ScheduledAt))
	return j
}

// consoleStamp is how the console prints a time.
func consoleStamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// screenshot writes the browser's page to docs/name when
// UPDATE_SCREENSHOT is set, else to a temporary directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), name)
	if os.Getenv("UPDATE_SCREENSHOT") != "" {
		out = filepath.Join("..", "docs", name)
	}
	require.NoError(t, os.WriteFile(out, shot, 0o644))
}

// consolePost posts a console form with the operator's credentials and
// the CSRF token, and returns the answer without following a redirect.
func consolePost(t *testing.T, s *server, path string, form url.Values) (int, string) {
	t.Helper()
	form.Set(admin.CSRFField, admin.CSRFToken(adminToken))
	req, err := http.NewRequest(http.MethodPost, s.base+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	basic(adminToken)(req)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(raw)
}

// TestJourneyHandlerFailureToRecovery is an operator's way through a
// failing handler: the subscription module's write is refused by the
// database, River UI's Retryable list shows the apply job with its
// attempt and its job page the error naming the module; the console's
// Failed page lists the event with the handler that failed and River's
// next retry; the cause is fixed, the event requeued from the console,
// and it settles with its effect applied exactly once.
// UPDATE_SCREENSHOT=1 also writes River UI's Retryable list to
// docs/riverui-retryable.png.
func TestJourneyHandlerFailureToRecovery(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	lift := refuseBrokenPlan(t, s)
	const id = "evt_journey_broken"
	s.claim(t, planEvent(id, "price_broken", time.Now()), nil)

	// A handler failure is a River error: the job waits for its retry with
	// the error recorded (available until the retry is due when that is
	// within River's scheduler interval, retryable when later).
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event' AND args->>'event_id' = $1
			AND state IN ('available', 'retryable') AND scheduled_at > now() AND cardinality(errors) > 0`, id) == 1
	}, "the failing apply job never waited for a retry")
	// Its retries come 1 s, 2 s, 4 s ... apart: park the next one an hour
	// away so that what the pages show holds still while they are read.
	parkRetries(t, s, id)
	job := jobOf(t, s, id)
	require.Equal(t, "retryable", job.State)
	require.EqualValues(t, 84, job.MaxAttempts)
	require.GreaterOrEqual(t, job.Attempt, int64(1))
	var attempts int64
	require.NoError(t, s.db.SQL.QueryRow(`SELECT attempts FROM webhook_event WHERE event_id = $1`, id).Scan(&attempts))
	require.Equal(t, job.Attempt, attempts, "River's attempt and the ledger row's agree")
	attempt := strconv.FormatInt(job.Attempt, 10)
	jobPath := "/riverui/jobs/" + strconv.FormatInt(job.ID, 10)

	// River UI's Retryable list: the apply_event job of the event, with
	// its attempt out of 84. River UI renders in the browser: wait for it.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.base+"/riverui/jobs?state=retryable"),
		chromedp.WaitVisible(`//a[@href="/riverui/jobs?state=retryable"][@aria-current="page"]`),
		chromedp.WaitVisible(fmt.Sprintf(`//li[.//a[@href=%q][normalize-space(.)="apply_event"]]`+
			`[.//p[contains(., '"event_id":"%s"')]]`+
			`[.//div[normalize-space(string(.))="%s/84"]]`, jobPath, id, attempt)),
	))
	screenshot(t, ctx, "riverui-retryable.png")

	// Its job page: the state, the attempt, and each attempt's error
	// naming the module and handler, and the reason.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(fmt.Sprintf(`//a[@href=%q]`, jobPath)),
		chromedp.WaitVisible(`//dt[normalize-space(.)="State"]/following-sibling::dd[normalize-space(.)="Retryable"]`),
		chromedp.WaitVisible(fmt.Sprintf(`//dt[normalize-space(.)="Attempt"]/following-sibling::dd[normalize-space(.)="%s / 84"]`, attempt)),
		chromedp.WaitVisible(fmt.Sprintf(`//h4[span[normalize-space(.)="Failed"]][span[normalize-space(.)="(Attempt %s)"]]`, attempt)),
	))
	failure := `//div[not(*)][starts-with(normalize-space(.), "subscription.Flush: ")][contains(., 'violates check constraint "no_broken_plan"')]`
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(failure)))
	errs, err := chromedp.Run(ctx, chromedp.Nodes(failure))
	require.NoError(t, err)
	require.Len(t, errs, int(job.Attempt), "one error per failed attempt")

	// The console's Failed page: the event, the handler that failed and
	// River's next retry.
	open(t, ctx, s.base+"/console/failed", chromedp.WaitVisible(chromedp.CSS("#failed-total")))
	require.Equal(t, "1", text(t, ctx, "#failed-total"))
	row := text(t, ctx, "table.events tr.status-failed")
	require.Contains(t, row, id)
	require.Equal(t, "subscription.Flush", text(t, ctx, "tr.status-failed td.failed-in"))
	next := text(t, ctx, "tr.status-failed td.next")
	require.Contains(t, next, consoleStamp(job.ScheduledAt), "the next retry is River's scheduled_at")
	require.Regexp(t, `\(in [45]\dm\d+s\)`, next, "about an hour away")
	require.Contains(t, row, "no_broken_plan")

	// The event's page: the failure history, the module, River's job.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(fmt.Sprintf(`//td/a[text()=%q]`, id)),
		chromedp.WaitVisible(chromedp.CSS("#status")),
	))
	require.Equal(t, "failed", text(t, ctx, "#status"))
	require.Equal(t, "subscription.Flush (module subscription)", text(t, ctx, "#failed-in"))
	require.Equal(t, "retryable", text(t, ctx, "#job-state"))
	require.Equal(t, attempt+" / 84", text(t, ctx, "#job-attempt"))
	require.Contains(t, text(t, ctx, "#next-retry"), consoleStamp(job.ScheduledAt))
	require.Equal(t, "none yet: no apply has committed", text(t, ctx, "#handlers"))
	history, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSSAll("#failures tr td:first-child")))
	require.NoError(t, err)
	require.Len(t, history, int(min(job.Attempt, 10)), "one entry per failure, newest first")
	require.Equal(t, attempt, text(t, ctx, "#failures tr:nth-child(2) td:first-child"), "newest first")
	require.Contains(t, text(t, ctx, "#failures tr:nth-child(2)"), "subscription.Flush")
	href, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#failures tr:nth-child(2) a"), "href"))
	require.NoError(t, err)
	require.Equal(t, jobPath, href.Value, "each failure links its River job")

	// Fix the cause and requeue from the event's page.
	lift()
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#requeue")), chromedp.WaitVisible(chromedp.CSS("#done"))))
	require.Contains(t, text(t, ctx, "#done"), "Requeued")
	s.waitSettled(t, id)
	dbtest.Eventually(t, func() bool { return jobOf(t, s, id).State == "completed" }, "the apply job never completed")

	// Its effect exists exactly once; the row, River's job and the page agree.
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE plan = 'price_broken'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE external_id = $1`, "sub_"+id))
	done := jobOf(t, s, id)
	require.Equal(t, job.ID, done.ID, "the requeue brought the event's own job forward, no second job")
	require.EqualValues(t, 1, done.Attempt, "a requeue starts River's attempts again, so River UI tells the ledger's story")
	var (
		handlers, failures string
		lastError          sql.NullString
	)
	require.NoError(t, s.db.SQL.QueryRow(`SELECT attempts, handlers::text, failure_log::text, last_error FROM webhook_event WHERE event_id = $1`, id).
		Scan(&attempts, &handlers, &failures, &lastError))
	require.Equal(t, job.Attempt+1, attempts, "every failed attempt and the one that settled")
	require.JSONEq(t, `["subscription"]`, handlers)
	var log []map[string]any
	require.NoError(t, json.Unmarshal([]byte(failures), &log))
	require.Len(t, log, int(min(job.Attempt, 10)), "the failure history survives the recovery")

	require.NoError(t, chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#status"))))
	require.Equal(t, "settled", text(t, ctx, "#status"))
	require.Equal(t, "subscription", text(t, ctx, "#handlers"))
	require.Equal(t, "subscription.Flush (module subscription)", text(t, ctx, "#failed-in"), "the last failure, kept")
	require.Equal(t, "completed", text(t, ctx, "#job-state"))
	open(t, ctx, s.base+"/console/failed", chromedp.WaitVisible(chromedp.CSS("#failed-total")))
	require.Equal(t, "0", text(t, ctx, "#failed-total"))

	// A settled event cannot be discarded: the page says why.
	code, body := consolePost(t, s, "/console/event/discard", url.Values{"namespace": {"stripe"}, "id": {id}, "reason": {"too late"}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "Not discarded: the event is settled")
	require.Equal(t, "settled", status(t, s, id))
}

// TestJourneyDiscardPoisonEvent: a subscription event without its object
// fails for good (River cancels its job); an operator discards it from the
// console with a reason, and it leaves the backlog and the Failed page,
// shows under the events page's discarded filter, and a requeue brings it
// back (it fails again: it is poison).
func TestJourneyDiscardPoisonEvent(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	const id = "evt_journey_poison"
	s.claim(t, []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"customer.subscription.updated","created":%d,"data":{"object":{}}}`,
		id, time.Now().Unix())), nil)
	dbtest.Eventually(t, func() bool {
		return status(t, s, id) == "failed" && jobOf(t, s, id).State == "cancelled"
	}, "the poison event never failed for good")
	stats := func() map[string]any {
		code, out, _ := s.admin(t, http.MethodGet, "/admin/stats", bearer(adminToken))
		require.Equal(t, http.StatusOK, code)
		return out
	}
	require.EqualValues(t, 1, stats()["by_status"].(map[string]any)["failed"])

	eventPage := s.base + "/console/event?" + url.Values{"namespace": {"stripe"}, "id": {id}}.Encode()
	open(t, ctx, eventPage, chromedp.WaitVisible(chromedp.CSS("#status")))
	require.Equal(t, "failed", text(t, ctx, "#status"))
	require.Equal(t, "cancelled", text(t, ctx, "#job-state"))
	require.Equal(t, "none: failed for good (River cancelled the job)", text(t, ctx, "#next-retry"))
	require.Contains(t, text(t, ctx, "#failed-in"), "module subscription")
	require.Contains(t, text(t, ctx, "#last-error"), "data.object.id: required member is missing")

	// A reason of blanks is no reason: 400, and nothing changes.
	resp, err := chromedp.RunResponse(ctx, chromedp.SendKeys(chromedp.CSS("#reason"), "   "), chromedp.Click(chromedp.CSS("#discard")))
	require.NoError(t, err)
	require.EqualValues(t, http.StatusBadRequest, resp.Status)
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#error"))))
	require.Contains(t, text(t, ctx, "#error"), "a discard needs a reason")
	require.Equal(t, "failed", text(t, ctx, "#status"))

	// While an apply holds the row, the discard is refused with why.
	tx, err := s.db.SQL.Begin()
	require.NoError(t, err)
	_, err = tx.Exec(`SELECT 1 FROM webhook_event WHERE event_id = $1 FOR UPDATE`, id)
	require.NoError(t, err)
	open(t, ctx, eventPage, chromedp.WaitVisible(chromedp.CSS("#reason")))
	resp, err = chromedp.RunResponse(ctx, chromedp.SendKeys(chromedp.CSS("#reason"), "held"), chromedp.Click(chromedp.CSS("#discard")))
	require.NoError(t, err)
	require.EqualValues(t, http.StatusConflict, resp.Status)
	require.Contains(t, text(t, ctx, "#error"), "a job is applying this event right now")
	require.NoError(t, tx.Rollback())
	require.Equal(t, "failed", status(t, s, id))

	// Discard with a reason.
	const reason = "customer deleted upstream; no subscription to update"
	open(t, ctx, eventPage, chromedp.WaitVisible(chromedp.CSS("#reason")))
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#reason"), reason),
		chromedp.Click(chromedp.CSS("#discard")),
		chromedp.WaitVisible(chromedp.CSS("#done")),
	))
	require.Contains(t, text(t, ctx, "#done"), "Discarded")
	require.Equal(t, "discarded", text(t, ctx, "#status"))
	require.Equal(t, reason, text(t, ctx, "#discard-reason"))
	require.Equal(t, "none: discarded (requeue brings it back)", text(t, ctx, "#next-retry"))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = $1 AND status = 'discarded' AND discard_reason = $2`, id, reason))

	// It left the backlog: stats, the overview, the Failed page.
	st := stats()
	require.EqualValues(t, 1, st["by_status"].(map[string]any)["discarded"])
	require.EqualValues(t, 0, st["by_status"].(map[string]any)["failed"])
	require.EqualValues(t, 0, st["oldest_pending_seconds"])
	open(t, ctx, s.base+"/console/", chromedp.WaitVisible(chromedp.CSS("#backlog")))
	require.Contains(t, text(t, ctx, "#backlog"), "failed\t0")
	require.Equal(t, "none", text(t, ctx, "#oldest"))
	require.Equal(t, "1", text(t, ctx, "#discarded"))
	open(t, ctx, s.base+"/console/failed", chromedp.WaitVisible(chromedp.CSS("#failed-total")))
	require.Equal(t, "0", text(t, ctx, "#failed-total"))
	require.NotContains(t, text(t, ctx, "table.events"), id)

	// The events page filtered to discarded lists it, with the reason.
	open(t, ctx, s.base+"/console/events")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(`select[name="status"]`), "discarded"),
		chromedp.Click(chromedp.CSS("#apply-filter")),
		chromedp.WaitReady(`//select[@name="status"]/option[@selected][text()="discarded"]`),
	))
	require.Contains(t, text(t, ctx, "table.events tr.status-discarded"), id)
	require.Equal(t, "discarded: "+reason, text(t, ctx, "tr.status-discarded .reason"))

	// A requeue brings it back; it is poison, so it fails again.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(fmt.Sprintf(`//td/a[text()=%q]`, id)),
		chromedp.WaitVisible(chromedp.CSS("#requeue")),
		chromedp.Click(chromedp.CSS("#requeue")),
		chromedp.WaitVisible(chromedp.CSS("#done")),
	))
	require.Contains(t, text(t, ctx, "#done"), "Requeued")
	dbtest.Eventually(t, func() bool {
		return status(t, s, id) == "failed" && jobOf(t, s, id).State == "cancelled" &&
			s.db.Count(t, `SELECT attempts FROM webhook_event WHERE event_id = $1`, id) == 2
	}, "the requeued poison event never failed again")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = $1 AND discard_reason IS NULL`, id),
		"it left discarded")
	st = stats()
	require.EqualValues(t, 0, st["by_status"].(map[string]any)["discarded"])
	require.EqualValues(t, 1, st["by_status"].(map[string]any)["failed"])
	open(t, ctx, s.base+"/console/failed", chromedp.WaitVisible(chromedp.CSS("#failed-total")))
	require.Equal(t, "1", text(t, ctx, "#failed-total"))
}
