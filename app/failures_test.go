package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// failureGroup is a group as `hookledger failures --json` prints it.
type failureGroup struct {
	ID            string     `json:"id"`
	Count         int        `json:"count"`
	Source        string     `json:"source"`
	Handler       string     `json:"handler"`
	Error         string     `json:"error"`
	FirstFailedAt time.Time  `json:"first_failed_at"`
	LastFailedAt  time.Time  `json:"last_failed_at"`
	SampleEventID string     `json:"sample_event_id"`
	NextRetryAt   *time.Time `json:"next_retry_at"`
}

// failuresJSON runs `hookledger failures --json`.
func failuresJSON(t *testing.T) []failureGroup {
	t.Helper()
	code, stdout, stderr := run("failures", "--json")
	require.Equal(t, 0, code, stderr)
	var groups []failureGroup
	require.NoError(t, json.Unmarshal([]byte(stdout), &groups), stdout)
	return groups
}

// TestFailureGroupsCommandAndAPI: failing events of one cause are one
// group in the CLI and the admin API, with a stable id; a group action
// without --yes and without a terminal, without a reason, or on an
// unknown group changes nothing; the API refuses a cross-site POST; a
// requeue brings the group's events back (they fail again, into the same
// group) and a discard puts every one away, each reported.
func TestFailureGroupsCommandAndAPI(t *testing.T) {
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	refuseBrokenPlan(t, s)
	const n = 4
	var ids []string
	for i := range n {
		id := fmt.Sprintf("evt_group_%d", i)
		discardFailingEvent(t, s, id)
		ids = append(ids, id)
	}
	t.Setenv("DATABASE_URL", s.db.URL)

	groups := failuresJSON(t)
	require.Len(t, groups, 1, "%+v", groups)
	g := groups[0]
	require.Equal(t, n, g.Count)
	require.Equal(t, "stripe", g.Source)
	require.Regexp(t, `^subscription\.\w+$`, g.Handler)
	require.Contains(t, g.Error, `violates check constraint "…"`)
	require.Contains(t, ids, g.SampleEventID)
	require.False(t, g.FirstFailedAt.IsZero())
	require.False(t, g.LastFailedAt.Before(g.FirstFailedAt))
	require.NotNil(t, g.NextRetryAt, "River waits to retry them (parked an hour away)")

	code, stdout, stderr := run("failures")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, g.ID)
	require.Contains(t, stdout, g.Handler)

	// The admin API lists the same group.
	code, out, _ := s.admin(t, http.MethodGet, "/admin/failures", bearer(adminToken))
	require.Equal(t, http.StatusOK, code)
	apiGroups := out["groups"].([]any)
	require.Len(t, apiGroups, 1)
	require.Equal(t, g.ID, apiGroups[0].(map[string]any)["id"])
	require.EqualValues(t, n, apiGroups[0].(map[string]any)["count"])
	code, _, _ = s.admin(t, http.MethodGet, "/admin/failures", nil)
	require.Equal(t, http.StatusUnauthorized, code)

	// Refusals change nothing.
	code, _, stderr = run("failures", "requeue", g.ID)
	require.Equal(t, 2, code, "no terminal and no --yes: %s", stderr)
	require.Contains(t, stderr, "--yes")
	code, _, stderr = run("failures", "discard", g.ID, "--yes")
	require.Equal(t, 2, code, "no reason: %s", stderr)
	code, _, stderr = run("failures", "requeue", "0123456789abcdef", "--yes")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "no failed event is in this group")
	code, _, stderr = run("failures", "requeue", g.ID, "extra", "--yes")
	require.Equal(t, 2, code, stderr)
	code, stdout, stderr = run("failures", "discard", g.ID, "--reason", "poison", "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, fmt.Sprintf("group %s: %d failed event(s)", g.ID, n))
	crossSite := discardHeaders(basic(adminToken))
	crossSite.Set("Origin", "http://evil.example")
	code, _ = s.post(t, "/admin/failures/"+g.ID+"/discard", discardBody("forged"), crossSite)
	require.Equal(t, http.StatusForbidden, code)
	code, _ = s.post(t, "/admin/failures/0123456789abcdef/requeue", nil, discardHeaders(bearer(adminToken)))
	require.Equal(t, http.StatusNotFound, code)
	code, _ = s.post(t, "/admin/failures/"+g.ID+"/discard", discardBody(" "), discardHeaders(bearer(adminToken)))
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, n, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'failed'`))

	// Requeue through the API: each event reported, back to claimed; they
	// fail again, into the same group.
	code, out = s.post(t, "/admin/failures/"+g.ID+"/requeue", nil, discardHeaders(bearer(adminToken)))
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, g.ID, out["group"])
	require.Len(t, out["events"], n)
	counts := out["counts"].(map[string]any)
	require.EqualValues(t, n, counts["requeued"].(float64)+orZero(counts["pending"]), "%v", counts)
	for _, id := range ids {
		parkRetries(t, s, id)
	}
	groups = failuresJSON(t)
	require.Len(t, groups, 1)
	require.Equal(t, g.ID, groups[0].ID, "the same cause keeps its id")

	code, stdout, stderr = run("failures", "discard", g.ID, "--reason", "poison payload", "--yes")
	require.Equal(t, 0, code, stderr)
	for _, id := range ids {
		require.Contains(t, stdout, "stripe/"+id+": discarded")
	}
	require.Contains(t, stdout, fmt.Sprintf("%d discarded", n))
	require.Equal(t, n, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'discarded' AND discard_reason = 'poison payload'`))
	require.Empty(t, failuresJSON(t))
	code, stdout, _ = run("failures")
	require.Equal(t, 0, code)
	require.Equal(t, "no failed events\n", stdout)
}

func orZero(v any) float64 {
	f, _ := v.(float64)
	return f
}
