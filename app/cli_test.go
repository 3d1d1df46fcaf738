package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// settledEvents posts n subscription events and waits until all settled.
func settledEvents(t *testing.T, s *server, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s_%d", prefix, i)
		body := subEvent(ids[i], "active", time.Now().Unix()-int64(n-i))
		code, _ := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
		require.Equal(t, http.StatusOK, code)
	}
	for _, id := range ids {
		s.waitSettled(t, id)
	}
	return ids
}

// reapplied lists the events applied more than once, or waiting to be.
func reapplied(t *testing.T, s *server) []string {
	t.Helper()
	rows, err := s.db.SQL.Query(`SELECT event_id FROM webhook_event WHERE attempts > 1 OR status <> 'settled' ORDER BY event_id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		out = append(out, id)
	}
	require.NoError(t, rows.Err())
	return out
}

func (s *server) waitAttempts(t *testing.T, id string, attempts int) {
	t.Helper()
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = $1 AND status = 'settled' AND attempts = $2`, id, attempts) == 1
	})
}

// TestRequeueTouchesExactlyTheNamedEvents: whatever the order of flags
// and ids, requeue changes the named events and no other.
func TestRequeueTouchesExactlyTheNamedEvents(t *testing.T) {
	s := start(t, nil)
	ids := settledEvents(t, s, "evt_rq", 12)
	t.Setenv("DATABASE_URL", s.db.URL)

	code, stdout, stderr := run("events", "requeue", "--force", ids[5])
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, ids[5])
	s.waitAttempts(t, ids[5], 2)
	require.Equal(t, []string{ids[5]}, reapplied(t, s), "only the named event is requeued")

	code, _, stderr = run("events", "requeue", ids[3], "--force", ids[7])
	require.Equal(t, 0, code, stderr)
	s.waitAttempts(t, ids[3], 2)
	s.waitAttempts(t, ids[7], 2)
	require.ElementsMatch(t, []string{ids[3], ids[5], ids[7]}, reapplied(t, s))

	// Without --force a settled event is refused, and a typo among the ids
	// changes nothing at all.
	code, _, stderr = run("events", "requeue", ids[1])
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "settled")
	code, _, stderr = run("events", "requeue", "--force", ids[1], "evt_rq_typo")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "evt_rq_typo")
	require.ElementsMatch(t, []string{ids[3], ids[5], ids[7]}, reapplied(t, s))

	// --dry-run with ids changes nothing; ids and filters do not mix.
	code, stdout, _ = run("events", "requeue", "--force", "--dry-run", ids[0])
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "would requeue stripe/"+ids[0])
	require.Equal(t, 2, badCount(run("events", "requeue", "--force", "--type", "customer.subscription.updated", ids[0])))
	require.ElementsMatch(t, []string{ids[3], ids[5], ids[7]}, reapplied(t, s))
}

// TestBulkRequeueNeedsAFilterAndConfirmation: no id and no filter is a
// usage error; a bulk requeue without a terminal needs --yes.
func TestBulkRequeueNeedsAFilterAndConfirmation(t *testing.T) {
	s := start(t, nil)
	ids := settledEvents(t, s, "evt_bulk", 4)
	t.Setenv("DATABASE_URL", s.db.URL)

	code, _, stderr := run("events", "requeue", "--force")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--all")
	code, _, stderr = run("events", "requeue", "--force", "--all")
	require.Equal(t, 2, code, "without a terminal a bulk requeue needs --yes")
	require.Contains(t, stderr, "--yes")
	require.Empty(t, reapplied(t, s))

	code, stdout, _ := run("events", "requeue", "--force", "--all", "--dry-run")
	require.Equal(t, 0, code)
	for _, id := range ids {
		require.Contains(t, stdout, id)
	}
	require.Contains(t, stdout, "would requeue 4 settled event(s)")
	require.Empty(t, reapplied(t, s))

	code, stdout, stderr = run("events", "requeue", "--force", "--all", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "requeued 4 settled")
	for _, id := range ids {
		s.waitAttempts(t, id, 2)
	}
}

func TestPruneAsksBeforeDeletingMany(t *testing.T) {
	s := start(t, nil)
	settledEvents(t, s, "evt_prune", 3)
	// The server's own prune job (run when its River leader is elected)
	// would delete the aged rows first: only the command deletes here.
	require.NoError(t, s.stop())
	t.Setenv("DATABASE_URL", s.db.URL)
	_, err := s.db.SQL.Exec(`UPDATE webhook_event SET received_at = now() - interval '100 days'`)
	require.NoError(t, err)

	code, _, stderr := run("prune")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "delete 3 settled")
	require.Equal(t, 3, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
	code, stdout, _ := run("prune", "--yes")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "deleted 3")
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
}

// TestMigrateNamesTheDatabaseAndServeRefusesAnUnmigratedOne: migrate
// prints the redacted URL; down --all needs --yes; serve on the reverted
// database says to run migrate up, in one line.
func TestMigrateNamesTheDatabaseAndServeRefusesAnUnmigratedOne(t *testing.T) {
	s := start(t, nil)
	url := strings.Replace(s.db.URL, "postgres://postgres@", "postgres://postgres:hunter2@", 1)
	t.Setenv("DATABASE_URL", url)

	code, stdout, stderr := run("migrate", "status")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "database ")
	require.Contains(t, stdout, s.db.Name)
	require.NotContains(t, stdout, "hunter2")

	code, _, stderr = run("migrate", "down", "--all")
	require.Equal(t, 2, code, "down --all reverts many steps: --yes without a terminal")
	require.Contains(t, stderr, "--yes")
	code, stdout, _ = run("migrate", "down", "--all", "--dry-run")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "down reverts")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM information_schema.tables WHERE table_name = 'webhook_event'`))
	require.NoError(t, s.stop())

	code, stdout, stderr = run("migrate", "down", "--all", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "version 0")
	require.NotContains(t, stdout, "hunter2")

	t.Setenv("HTTP_ADDR", "127.0.0.1:0")
	code, _, stderr = run("serve")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "hookledger migrate up")
	require.NotContains(t, stderr, "hunter2")
	require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %s", stderr)

	code, _, stderr = run("migrate", "up")
	require.Equal(t, 0, code, stderr)

	// Partly migrated: one step down needs no confirmation.
	code, _, stderr = run("migrate", "down")
	require.Equal(t, 0, code, stderr)
	code, _, stderr = run("serve")
	require.Equal(t, 1, code)
	require.Regexp(t, `at migration \d+ of \d+: run .hookledger migrate up.\n$`, stderr)
	code, _, stderr = run("migrate", "up")
	require.Equal(t, 0, code, stderr)
}

func TestEventsListPages(t *testing.T) {
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	ids := settledEvents(t, s, "evt_page", 5)
	t.Setenv("DATABASE_URL", s.db.URL)
	long := strings.Repeat("x", 300)
	_, err := s.db.SQL.Exec(`UPDATE webhook_event SET last_error = $1 WHERE event_id = $2`, long, ids[4])
	require.NoError(t, err)

	code, stdout, stderr := run("events", "list", "--limit", "2", "--since", "2h")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, ids[4])
	require.Contains(t, stdout, ids[3])
	require.NotContains(t, stdout, long, "long errors are cut in the table")
	require.Contains(t, stdout, "…")
	require.Contains(t, stdout, "more: --after ")

	var seen []string
	after := ""
	for page := 0; page < 5; page++ {
		args := []string{"events", "list", "--json", "--limit", "2"}
		if after != "" {
			args = append(args, "--after", after)
		}
		code, stdout, _ = run(args...)
		require.Equal(t, 0, code)
		var out struct {
			Events []struct {
				EventID string `json:"event_id"`
			} `json:"events"`
			Next string `json:"next"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &out))
		for _, e := range out.Events {
			seen = append(seen, e.EventID)
		}
		if after = out.Next; after == "" {
			break
		}
	}
	require.Equal(t, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}, seen)

	code, stdout, _ = run("events", "list", "--since", "2026-01-01T00:00:00Z", "--until", "1h")
	require.Equal(t, 0, code)
	require.NotContains(t, stdout, ids[0], "received within the last hour")
	require.Equal(t, 2, badCount(run("events", "list", "--since", "yesterday")))

	code, out, _ := s.admin(t, "GET", "/admin/events?since=2h&limit=500", bearer(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.Len(t, out["events"], 5)
	code, out, _ = s.admin(t, "GET", "/admin/events?until=1h", bearer(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, out["events"])
}

// TestUsageErrors: unknown commands, arguments and flags, and invalid
// values exit 2 before touching a database.
func TestUsageErrors(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
	for _, args := range [][]string{
		{}, {"oops"}, {"serve", "oops"}, {"serve", "--bogus"}, {"serve", "--role", "boss"},
		{"prune", "--dry-run", "extra"}, {"events"}, {"events", "lst"}, {"events", "requeue"},
		{"events", "show"}, {"events", "show", "a", "b"}, {"events", "list", "--limit", "0"},
		{"events", "list", "--status", "nope"}, {"events", "discard"}, {"events", "discard", "evt_x"},
		{"events", "discard", "evt_x", "--reason", ""}, {"events", "requeue", "--status", "claimed"}, {"migrate"}, {"migrate", "sideways"}, {"migrate", "up", "extra"},
		{"replay", "stripe", "extra", "--since", "1h"}, {"trigger"}, {"trigger", "invoice.unknown"},
		{"simulate", "--duplicates", "3"}, {"simulate", "--reorder", "-1"}, {"simulate", "--events", "0"},
		{"simulate", "--provider", "bitbucket"}, {"simulate", "--types", "push"}, {"version", "extra"},
	} {
		code, _, stderr := run(args...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, _ := run(args...)
		require.Equal(t, 0, code)
		require.Regexp(t, `^hookledger \S+, revision \S+.*, go1\.`, stdout)
	}
}

func TestReplayNeedsTheAPIKey(t *testing.T) {
	t.Setenv("STRIPE_API_KEY", "")
	t.Setenv("PADDLE_API_KEY", "")
	t.Setenv("GITHUB_TOKEN", "")
	t.Setenv("STRIPE_API_BASE", "http://127.0.0.1:1")
	for name, env := range map[string][]string{
		"STRIPE_API_KEY": {"replay", "stripe", "--since", "1h"},
		"PADDLE_API_KEY": {"replay", "paddle", "--since", "1h"},
		"GITHUB_TOKEN":   {"replay", "github", "--since", "1h", "--repo", "a/b", "--hook", "1"},
	} {
		code, stdout, stderr := run(env...)
		require.Equal(t, 1, code)
		require.Contains(t, stderr, name)
		require.Empty(t, stdout, "nothing was fetched")
	}
	code, stdout, _ := run("replay", "stripe", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "--failed-only")
	require.NotContains(t, stdout, "--repo", "only Stripe's flags")
	code, stdout, _ = run("replay", "github", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "--repo")
	require.NotContains(t, stdout, "--failed-only")
}

func TestSimulateSaysWhenNothingListens(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("http://127.0.0.1:%d/webhooks/stripe", freePort(t))
	code, _, stderr := run("simulate", "--url", url, "--secret", "whsec_x", "--events", "3")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "nothing listens")
}

// TestVerifyCountsSecretsFromZero, as secret_index in the ledger and the
// configuration's secret lists do.
func TestVerifyCountsSecretsFromZero(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_v","type":"invoice.paid"}`)
	file := filepath.Join(t.TempDir(), "body.json")
	require.NoError(t, os.WriteFile(file, body, 0o600))
	now := time.Now().Unix()
	header := "Stripe-Signature: " + provider.SignStripe("whsec_new", now, body)
	code, stdout, _ := run("verify", "--provider", "stripe", "--secret", "whsec_new", "--header", header, "--body-file", file)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "matches secret 0")
	code, stdout, _ = run("verify", "--body-file", file, "--secret", "whsec_old", "--provider", "stripe", "--secret", "whsec_new", "--header", header)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "matches secret 1")
	code, _, stderr := run("verify", "--provider", "standard", "--secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "--secret", "not base64!", "--header", header, "--body-file", file)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--secret 1 ")
}
