package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/app"
)

// listLine is the line of `events list` output that names id.
func listLine(t *testing.T, stdout, id string) string {
	t.Helper()
	for _, line := range strings.Split(stdout, "\n") {
		if strings.Contains(line, " "+id+" ") {
			return line
		}
	}
	t.Fatalf("no line for %s in:\n%s", id, stdout)
	return ""
}

// TestEventsDiscardCommand: discard takes ids and flags in any order,
// needs a reason (exit 2), changes nothing when an id is unknown or
// settled (exit 1), and prints a line per event; list and show tell the
// reason, the failures and the job; requeue brings the event back.
func TestEventsDiscardCommand(t *testing.T) {
	s := start(t, nil)
	lift := refuseBrokenPlan(t, s)
	ok := discardPlanEvent("evt_cli_ok", "price_pro")
	code, _ := s.post(t, "/webhooks/stripe", ok, signed(ok, time.Now()))
	require.Equal(t, http.StatusOK, code)
	unhandled := []byte(fmt.Sprintf(`{"id":"evt_cli_unhandled","type":%q,"created":%d,"data":{"object":{"id":"in_1"}}}`, app.UnhandledType, time.Now().Unix()))
	code, _ = s.post(t, "/webhooks/stripe", unhandled, signed(unhandled, time.Now()))
	require.Equal(t, http.StatusOK, code)
	s.waitSettled(t, "evt_cli_ok")
	s.waitSettled(t, "evt_cli_unhandled")
	discardFailingEvent(t, s, "evt_cli_broken")
	discardFailingEvent(t, s, "evt_cli_left")
	t.Setenv("DATABASE_URL", s.db.URL)

	// The failing events' table lines keep the handler and its reason.
	code, stdout, stderr := run("events", "list")
	require.Equal(t, 0, code, stderr)
	for _, id := range []string{"evt_cli_broken", "evt_cli_left"} {
		line := listLine(t, stdout, id)
		require.Contains(t, line, " failed ")
		require.Regexp(t, ` subscription\.\w+: .*no_broken_plan`, line)
	}
	require.Contains(t, listLine(t, stdout, "evt_cli_unhandled"), "settled (unhandled)")
	require.NotContains(t, listLine(t, stdout, "evt_cli_ok"), "unhandled")

	// Usage errors change nothing.
	for _, args := range [][]string{
		{"events", "discard", "evt_cli_broken"},
		{"events", "discard", "evt_cli_broken", "--reason", "  "},
		{"events", "discard", "--reason", "gone"},
		{"events", "discard", "evt_cli_broken", "--reason", "gone", "--bogus"},
	} {
		code, _, stderr = run(args...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
	}
	code, _, stderr = run("events", "discard", "evt_cli_broken")
	require.Contains(t, stderr, "--reason")

	// An unknown or settled id among them: exit 1, nothing discarded.
	code, _, stderr = run("events", "discard", "evt_cli_broken", "evt_cli_nope", "--reason", "gone")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "evt_cli_nope: event not found")
	code, _, stderr = run("events", "discard", "--reason", "gone", "evt_cli_broken", "evt_cli_ok")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "stripe/evt_cli_ok: event is settled")
	require.Equal(t, "failed", status(t, s, "evt_cli_broken"))
	require.Equal(t, "settled", status(t, s, "evt_cli_ok"))

	code, stdout, stderr = run("events", "discard", "--reason", "customer deleted", "evt_cli_broken", "--namespace", "stripe")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "stripe/evt_cli_broken: discarded (reason: customer deleted)\n", stdout)
	require.Equal(t, "discarded", status(t, s, "evt_cli_broken"))
	require.Equal(t, "failed", status(t, s, "evt_cli_left"), "only the named event")

	code, stdout, stderr = run("events", "list", "--status", "discarded")
	require.Equal(t, 0, code, stderr)
	line := listLine(t, stdout, "evt_cli_broken")
	require.Contains(t, line, " discarded ")
	require.Contains(t, line, "reason: customer deleted")
	require.NotContains(t, stdout, "evt_cli_left")

	code, stdout, stderr = run("events", "show", "evt_cli_broken")
	require.Equal(t, 0, code, stderr)
	var shown struct {
		Event struct {
			Status        string   `json:"status"`
			DiscardReason string   `json:"discard_reason"`
			Handlers      []string `json:"handlers"`
			Failures      []struct {
				Attempt int       `json:"attempt"`
				JobID   int64     `json:"job_id"`
				At      time.Time `json:"at"`
				Handler string    `json:"handler"`
				Error   string    `json:"error"`
			} `json:"failures"`
		} `json:"event"`
		Job struct {
			Kind        string     `json:"kind"`
			State       string     `json:"state"`
			Attempt     int        `json:"attempt"`
			MaxAttempts int        `json:"max_attempts"`
			ScheduledAt *time.Time `json:"scheduled_at"`
		} `json:"job"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &shown), stdout)
	require.Equal(t, "discarded", shown.Event.Status)
	require.Equal(t, "customer deleted", shown.Event.DiscardReason)
	require.NotEmpty(t, shown.Event.Failures)
	require.Equal(t, 1, shown.Event.Failures[0].Attempt)
	require.NotZero(t, shown.Event.Failures[0].JobID)
	require.Contains(t, shown.Event.Failures[0].Error, "no_broken_plan")
	require.Equal(t, "apply_event", shown.Job.Kind)
	require.Equal(t, "cancelled", shown.Job.State)
	require.Nil(t, shown.Job.ScheduledAt)

	// The left one is waiting for its (parked) retry: show says when.
	code, stdout, _ = run("events", "show", "evt_cli_left")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(stdout), &shown), stdout)
	require.Contains(t, []string{"retryable", "scheduled"}, shown.Job.State)
	require.NotNil(t, shown.Job.ScheduledAt)
	require.WithinDuration(t, time.Now().Add(time.Hour), *shown.Job.ScheduledAt, 5*time.Minute)

	// Fixed: requeue brings it back, and it settles.
	lift()
	code, stdout, _ = run("events", "requeue", "--status", "discarded", "--dry-run")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "would requeue 1 discarded")
	code, stdout, stderr = run("events", "requeue", "evt_cli_broken")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "stripe/evt_cli_broken: requeued")
	s.waitSettled(t, "evt_cli_broken")
	code, stdout, _ = run("events", "show", "evt_cli_broken")
	require.Equal(t, 0, code)
	shown.Event.DiscardReason = ""
	require.NoError(t, json.Unmarshal([]byte(stdout), &shown), stdout)
	require.Equal(t, []string{"subscription"}, shown.Event.Handlers)
	require.Empty(t, shown.Event.DiscardReason)
	require.NotEmpty(t, shown.Event.Failures, "kept after recovery")
}

// TestEventsDiscardHelpNeedsNoDatabase.
func TestEventsDiscardHelpNeedsNoDatabase(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
	code, stdout, stderr := run("events", "discard", "--help")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "--reason")
	require.Contains(t, stdout, "requeue")
	code, _, stderr = run("events", "discard", "evt_x")
	require.Equal(t, 2, code, "a missing reason is told before any database: %s", stderr)
	code, _, stderr = run("events", "discard", "evt_x", "--reason", "gone")
	require.Equal(t, 1, code, stderr)
}
