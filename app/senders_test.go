package app_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hookledger/hookledger/app"
	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// newLogged builds the app as startOn does (role all, on db), with its log
// also recorded at info and above. The caller serves or closes it.
func newLogged(t *testing.T, db *dbtest.DB, env map[string]string) (*app.App, *observer.ObservedLogs) {
	t.Helper()
	vars := map[string]string{
		"DATABASE_URL":          db.URL,
		"STRIPE_WEBHOOK_SECRET": "whsec_other_secret," + secret,
		"LOG_LEVEL":             "info",
		"DB_MAX_CONNS":          strconv.Itoa(dbtest.MaxConns),
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.FromEnv(func(k string) string { return vars[k] })
	require.NoError(t, err)
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Core(), core))
	a, err := app.New(context.Background(), cfg, log, config.RoleAll)
	require.NoError(t, err)
	return a, logs
}

// startLogged boots the app on a fresh database as start does, with its
// log recorded.
func startLogged(t *testing.T, env map[string]string) (*server, *observer.ObservedLogs) {
	t.Helper()
	db := dbtest.New(t)
	a, logs := newLogged(t, db, env)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	var once sync.Once
	var serveErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			serveErr = <-done
			a.Close()
		})
		return serveErr
	}
	t.Cleanup(func() { require.NoError(t, stop()) })
	return &server{db: db, base: "http://" + ln.Addr().String(), stop: stop}, logs
}

// stripeSigned signs body as Stripe does with the given secret, now.
func stripeSigned(secret string, body []byte) http.Header {
	return http.Header{"Stripe-Signature": {provider.SignStripe(secret, time.Now().Unix(), body)}}
}

// sourceCells is the overview's row of source: the inner HTML of each
// cell (source, claimed, duplicates, rate, last delivery, signature
// failures, last failure, refused by allow_ips, too large, secret matched).
func (s *server) sourceCells(t *testing.T, source string) []string {
	t.Helper()
	code, page, _ := s.page(t, "/console/", basic(adminToken))
	require.Equal(t, http.StatusOK, code, page)
	row := regexp.MustCompile(`(?s)<tr>\s*<td><a href="/console/events\?source=` + regexp.QuoteMeta(source) + `">.*?</tr>`).FindString(page)
	require.NotEmpty(t, row, "no overview row for source %s", source)
	var cells []string
	for _, m := range regexp.MustCompile(`(?s)<td>(.*?)</td>`).FindAllStringSubmatch(row, -1) {
		cells = append(cells, m[1])
	}
	require.Len(t, cells, 10, row)
	return cells
}

// secretsShown is what the overview's "secret matched" cell says of each
// secret, without the time of its last match.
func (s *server) secretsShown(t *testing.T, source string) []string {
	t.Helper()
	var out []string
	for _, m := range regexp.MustCompile(`<div class="secret">(.*?)</div>`).FindAllStringSubmatch(s.sourceCells(t, source)[9], -1) {
		entry, _, _ := strings.Cut(m[1], ", last ")
		out = append(out, entry)
	}
	return out
}

// TestSecretRotationKeepsFingerprints is a rotation on one database: the
// secret A alone, then B added in front of it (A moves to #1), then A
// removed. Every row records the fingerprint of the secret that matched,
// the same for A at #0 and at #1; the overview groups by it, lists each
// configured secret (unused ones too) and names A as retired once it is no
// longer configured, with its count. The event page names the
// fingerprint too, and `hookledger verify` the position.
func TestSecretRotationKeepsFingerprints(t *testing.T) {
	t.Parallel()
	const secretA, secretB = "whsec_rotation_old", "whsec_rotation_new"
	db := dbtest.New(t)
	key := fingerprintKey(t, db)
	fpA, fpB := provider.SecretFingerprint(key, []byte(secretA)), provider.SecretFingerprint(key, []byte(secretB))
	require.Regexp(t, `^[0-9a-f]{12}$`, fpA)
	require.Regexp(t, `^[0-9a-f]{12}$`, fpB)
	require.NotEqual(t, fpA, fpB)
	require.Equal(t, fpA, provider.SecretFingerprint(key, []byte(secretA)), "the same on every computation")

	deliver := func(s *server, id, sec string, want int) {
		t.Helper()
		body := subEvent(id, "active", time.Now().Unix())
		code, out := s.post(t, "/webhooks/stripe", body, stripeSigned(sec, body))
		require.Equal(t, want, code, "%s: %v", id, out)
		if want == http.StatusOK {
			require.Equal(t, "claimed", out["status"], id)
		}
	}
	env := func(secrets string) map[string]string {
		return map[string]string{"STRIPE_WEBHOOK_SECRET": secrets, "ADMIN_TOKEN": adminToken}
	}

	// A alone.
	s := startOn(t, db, env(secretA), config.RoleAll)
	deliver(s, "evt_rot_a1", secretA, http.StatusOK)
	deliver(s, "evt_rot_a2", secretA, http.StatusOK)
	require.Equal(t, []string{"#0 <code>" + fpA + "</code>: 2"}, s.secretsShown(t, "stripe"))
	require.NoError(t, s.stop())

	// B in front, A kept while senders move over.
	s = startOn(t, db, env(secretB+","+secretA), config.RoleAll)
	require.Equal(t, []string{"#0 <code>" + fpB + "</code>: 0 (unused)", "#1 <code>" + fpA + "</code>: 2"}, s.secretsShown(t, "stripe"),
		"the new secret is listed before it matches anything")
	for _, id := range []string{"evt_rot_b1", "evt_rot_b2", "evt_rot_b3"} {
		deliver(s, id, secretB, http.StatusOK)
	}
	deliver(s, "evt_rot_a3", secretA, http.StatusOK)
	require.Equal(t, []string{"#0 <code>" + fpB + "</code>: 3", "#1 <code>" + fpA + "</code>: 3"}, s.secretsShown(t, "stripe"),
		"A's rows at #0 and at #1 are one secret")
	require.NoError(t, s.stop())

	// A removed.
	s = startOn(t, db, env(secretB), config.RoleAll)
	deliver(s, "evt_rot_a4", secretA, http.StatusUnauthorized)
	deliver(s, "evt_rot_b4", secretB, http.StatusOK)
	require.Equal(t, []string{"#0 <code>" + fpB + "</code>: 4", "retired <code>" + fpA + "</code>: 3"}, s.secretsShown(t, "stripe"))

	rows, err := db.SQL.Query(`SELECT event_id, secret_index, secret_fingerprint FROM webhook_event ORDER BY event_id`)
	require.NoError(t, err)
	defer rows.Close()
	got := map[string]string{}
	for rows.Next() {
		var (
			id, fp string
			index  int
		)
		require.NoError(t, rows.Scan(&id, &index, &fp))
		got[id] = fmt.Sprintf("#%d %s", index, fp)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]string{
		"evt_rot_a1": "#0 " + fpA, "evt_rot_a2": "#0 " + fpA, "evt_rot_a3": "#1 " + fpA,
		"evt_rot_b1": "#0 " + fpB, "evt_rot_b2": "#0 " + fpB, "evt_rot_b3": "#0 " + fpB, "evt_rot_b4": "#0 " + fpB,
	}, got)

	for id, want := range map[string]string{"evt_rot_a1": "#0 <code>" + fpA + "</code>", "evt_rot_a3": "#1 <code>" + fpA + "</code>"} {
		code, page, _ := s.page(t, "/console/event?id="+id, basic(adminToken))
		require.Equal(t, http.StatusOK, code, page)
		require.Contains(t, page, "<th>secret matched</th><td>"+want+"</td>", id)
	}

	body := subEvent("evt_rot_verify", "active", time.Now().Unix())
	file := filepath.Join(t.TempDir(), "body.json")
	require.NoError(t, os.WriteFile(file, body, 0o600))
	code, stdout, stderr := run("verify", "--provider", "stripe", "--secret", secretB, "--secret", secretA,
		"--header", "Stripe-Signature: "+stripeSigned(secretA, body).Get("Stripe-Signature"), "--body-file", file)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "matches secret 1 (secret_index 1, counting from 0)")
}

// mismatchLogged is the warning a duplicate with another body logs.
const mismatchLogged = "duplicate delivery with a different body: the stored body is kept"

// TestDuplicateMismatchCounted: a redelivery identical to the stored body,
// or differing only in Stripe's pending_webhooks, is a plain duplicate; one
// whose body differs elsewhere is counted in
// hookledger_duplicate_mismatch_total, logged as a warning, shown on the
// overview, and the stored body is kept. The comparison runs off the
// request path, in the order the duplicates arrived: a sentinel mismatch
// of another event, sent last, tells when every one before it was compared.
func TestDuplicateMismatchCounted(t *testing.T) {
	t.Parallel()
	s, logs := startLogged(t, map[string]string{"ADMIN_TOKEN": adminToken})
	event := func(id, status string, pending int) []byte {
		return []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"customer.subscription.updated","created":1764000000,"livemode":false,"pending_webhooks":%d,`+
			`"data":{"object":{"id":"sub_%s","customer":"cus_mm","status":%q,"items":{"data":[{"price":{"id":"price_pro"}}]}}}}`, id, pending, id, status))
	}
	deliver := func(body []byte, want string) {
		t.Helper()
		code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
		require.Equal(t, http.StatusOK, code, "%v", out)
		require.Equal(t, want, out["status"])
	}
	mismatches := func() []string {
		var ids []string
		for _, e := range logs.FilterMessage(mismatchLogged).All() {
			require.Equal(t, zapcore.WarnLevel, e.Level)
			ids = append(ids, e.ContextMap()["event_id"].(string))
		}
		return ids
	}
	// waitCompared waits until the sentinel's mismatch is logged for the
	// n-th time: every duplicate sent before it has been compared.
	waitCompared := func(n int) {
		t.Helper()
		dbtest.Eventually(t, func() bool {
			seen := 0
			for _, id := range mismatches() {
				if id == "evt_mm_sentinel" {
					seen++
				}
			}
			return seen == n
		}, "the sentinel's mismatch was never logged")
	}
	const series = `hookledger_duplicate_mismatch_total{source="stripe"}`

	deliver(event("evt_mm", "active", 1), "claimed")
	deliver(event("evt_mm_sentinel", "active", 1), "claimed")
	deliver(event("evt_mm", "active", 1), "duplicate")   // identical
	deliver(event("evt_mm", "active", 3), "duplicate")   // a later attempt: pending_webhooks only
	deliver(event("evt_mm", "canceled", 1), "duplicate") // another body
	deliver(event("evt_mm_sentinel", "past_due", 1), "duplicate")
	waitCompared(1)
	require.Equal(t, []string{"evt_mm", "evt_mm_sentinel"}, mismatches())
	require.Equal(t, 2.0, s.metricValue(t, series))

	deliver(event("evt_mm", "active", 0), "duplicate") // the last attempt: pending_webhooks 0
	deliver(event("evt_mm", "active", 1), "duplicate") // identical
	deliver(event("evt_mm", "unpaid", 2), "duplicate") // another body again
	deliver(event("evt_mm_sentinel", "past_due", 1), "duplicate")
	waitCompared(2)
	require.Equal(t, []string{"evt_mm", "evt_mm_sentinel", "evt_mm", "evt_mm_sentinel"}, mismatches())
	require.Equal(t, 4.0, s.metricValue(t, series))

	var status string
	require.NoError(t, s.db.SQL.QueryRow(`SELECT payload::jsonb->'data'->'object'->>'status' FROM webhook_event WHERE event_id = 'evt_mm'`).Scan(&status))
	require.Equal(t, "active", status, "the stored body is kept")
	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event`))

	cells := s.sourceCells(t, "stripe")
	require.Equal(t, "2", cells[1], "claimed")
	require.Regexp(t, `^8 <span class="warn"[^>]*>\(4 with another body\)</span>$`, cells[2], "duplicates")
}

// githubPush is the official new-branch push payload grown to commits
// commits, each with its own id and message: a large push as GitHub sends
// one.
func githubPush(t *testing.T, commits int) []byte {
	t.Helper()
	raw, err := os.ReadFile("../testdata/providers/github/push.with-new-branch.json")
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var push map[string]any
	require.NoError(t, dec.Decode(&push))
	first := push["commits"].([]any)[0].(map[string]any)
	list := make([]any, commits)
	for i := range list {
		c := make(map[string]any, len(first))
		for k, v := range first {
			c[k] = v
		}
		sum := sha1.Sum([]byte(strconv.Itoa(i)))
		c["id"], c["tree_id"] = hex.EncodeToString(sum[:]), hex.EncodeToString(sum[:])
		c["message"] = fmt.Sprintf("Update README.md (change %d of %d)\n\nKeeps the README in step with the release notes.", i+1, commits)
		c["url"] = "https://github.com/Codertocat/Hello-World/commit/" + hex.EncodeToString(sum[:])
		list[i] = c
	}
	push["commits"], push["head_commit"] = list, list[commits-1]
	push["after"] = list[commits-1].(map[string]any)["id"]
	body, err := json.MarshalIndent(push, "", "  ")
	require.NoError(t, err)
	return body
}

// postStream posts what body yields, declaring length (-1: chunked,
// undeclared), and returns the answer. A nil body is withheld: only its
// declared length is sent, so the answer proves the server refused it
// unread.
func (s *server) postStream(t *testing.T, path string, body io.Reader, length int64, header http.Header) (int, map[string]any) {
	t.Helper()
	pr, pw := io.Pipe()
	if body != nil {
		go func() {
			_, err := io.Copy(pw, body)
			pw.CloseWithError(err)
		}()
	}
	req, err := http.NewRequest(http.MethodPost, s.base+path, pr)
	require.NoError(t, err)
	req.ContentLength = length
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	pr.CloseWithError(errors.New("answered")) // ends the writer of a body the server stopped reading
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	return resp.StatusCode, out
}

// githubSigned is the headers of a GitHub push delivery of body.
func githubSigned(body []byte, guid string) http.Header {
	return http.Header{
		"X-Hub-Signature-256": {provider.SignGitHub(providerSecrets["github"], body)},
		"X-Github-Delivery":   {guid}, "X-Github-Event": {"push"},
	}
}

// TestBodyLimitPerProvider: without MAX_BODY_BYTES each source's limit is
// its provider's documented maximum (GitHub 25 MB) or the 1 MiB default
// (Stripe); MAX_BODY_BYTES caps every source. A body over the limit gets
// 413 naming the limit, whether its length is declared (refused unread)
// or not (cut off while reading), and writes nothing.
func TestBodyLimitPerProvider(t *testing.T) {
	t.Parallel()
	push := githubPush(t, 2000)
	require.Greater(t, len(push), 1<<20+512<<10, "well over the default limit") // about 1.64 MB
	require.Less(t, len(push), 2<<20)

	s := start(t, map[string]string{"GITHUB_WEBHOOK_SECRET": providerSecrets["github"]})
	code, out := s.postStream(t, "/webhooks/github", bytes.NewReader(push), int64(len(push)), githubSigned(push, "guid-large-push"))
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, "claimed", out["status"])
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'guid-large-push' AND jsonb_array_length(payload::jsonb->'commits') = 2000`))

	// Over GitHub's 25 MB: declared, refused unread; undeclared, cut off
	// once the limit is read.
	const githubLimit = 25 << 20
	overHeader := func(guid string) http.Header {
		return http.Header{"X-Github-Delivery": {guid}, "X-Github-Event": {"push"}}
	}
	code, out = s.postStream(t, "/webhooks/github", nil, githubLimit+1, overHeader("guid-over-declared"))
	require.Equal(t, http.StatusRequestEntityTooLarge, code, "%v", out)
	require.Equal(t, "body exceeds 26214400 bytes", out["error"])
	over := io.MultiReader(strings.NewReader(`{"ref":"refs/heads/main","pad":"`), io.LimitReader(zeros{}, githubLimit))
	code, out = s.postStream(t, "/webhooks/github", over, -1, overHeader("guid-over-undeclared"))
	require.Equal(t, http.StatusRequestEntityTooLarge, code, "%v", out)
	require.Equal(t, "body exceeds 26214400 bytes", out["error"])

	// Stripe keeps the 1 MiB default: one byte over is refused, the limit
	// itself is claimed.
	stripeOver := largeEvent(t, "evt_over_default", 1<<20+1)
	code, out = s.postStream(t, "/webhooks/stripe", nil, int64(len(stripeOver)), signed(stripeOver, time.Now()))
	require.Equal(t, http.StatusRequestEntityTooLarge, code, "%v", out)
	require.Equal(t, "body exceeds 1048576 bytes", out["error"])
	stripeAt := largeEvent(t, "evt_at_default", 1<<20)
	s.deliver(t, stripeAt, "", http.StatusOK)

	require.Equal(t, 2, s.db.Count(t, `SELECT count(*) FROM webhook_event`), "the push and the Stripe event at the limit")
	require.Equal(t, 2.0, s.metricValue(t, `hookledger_deliveries_total{outcome="too_large",source="github"}`))
	require.Equal(t, 1.0, s.metricValue(t, `hookledger_deliveries_total{outcome="too_large",source="stripe"}`))

	capped := start(t, map[string]string{"GITHUB_WEBHOOK_SECRET": providerSecrets["github"], "MAX_BODY_BYTES": "1048576"})
	code, out = capped.postStream(t, "/webhooks/github", nil, int64(len(push)), githubSigned(push, "guid-large-push"))
	require.Equal(t, http.StatusRequestEntityTooLarge, code, "%v", out)
	require.Equal(t, "body exceeds 1048576 bytes", out["error"])
	require.Zero(t, capped.db.Count(t, `SELECT count(*) FROM webhook_event`))
}

// TestAllowIPsRefusalsOnTheConsole: deliveries a source's allow_ips
// refuses are counted in the overview's "refused by allow_ips" column of
// that source, and of no other.
func TestAllowIPsRefusalsOnTheConsole(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "hookledger.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`
sources:
  - name: stripe-fenced
    provider: stripe
    namespace: stripe-fenced
    secrets: [whsec_fenced]
    allow_ips: [10.1.0.0/16]
`), 0o600))
	s := start(t, map[string]string{"HOOKLEDGER_CONFIG": cfg, "ADMIN_TOKEN": adminToken})
	for _, id := range []string{"evt_fenced_1", "evt_fenced_2", "evt_fenced_3"} {
		body := subEvent(id, "active", time.Now().Unix())
		code, out := s.post(t, "/webhooks/stripe-fenced", body, stripeSigned("whsec_fenced", body))
		require.Equal(t, http.StatusForbidden, code, "%v", out)
	}
	body := subEvent("evt_open", "active", time.Now().Unix())
	code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code, "%v", out)

	fenced := s.sourceCells(t, "stripe-fenced")
	require.Equal(t, "3", fenced[7], "refused by allow_ips")
	require.Equal(t, "0", fenced[1], "claimed")
	open := s.sourceCells(t, "stripe")
	require.Equal(t, "0", open[7], "refused by allow_ips")
	require.Equal(t, "1", open[1], "claimed")
	require.Equal(t, 3.0, s.metricValue(t, `hookledger_allowlist_refusals_total{source="stripe-fenced"}`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event`))
}

// publishedStale is the warning a stale fetched address list logs.
const publishedStale = "published address list is stale: run hookledger ips update (it is enforced as it is)"

// TestStaleFetchedListWarnsShippedDoesNot: a list fetched into
// PUBLISHED_IPS_FILE older than PUBLISHED_IPS_MAX_AGE is warned of at
// start-up; a fresh one is not, and neither is the copy shipped in the
// binary, however old (it ages with the release: its age is in the
// metrics, and an info line names it).
func TestStaleFetchedListWarnsShippedDoesNot(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "hookledger.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`
sources:
  - name: github-fenced
    provider: github
    namespace: github-fenced
    secrets: [gh_secret]
    allow_ips: [github]
`), 0o600))
	list := func(fetched time.Time) string {
		file := filepath.Join(t.TempDir(), "ips.json")
		raw, err := json.Marshal(provider.PublishedIPs{Lists: map[string]provider.PublishedList{
			"github": {Source: provider.PublishedSources["github"], FetchedAt: fetched, Prefixes: []string{"192.30.252.0/22"}},
		}})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(file, raw, 0o600))
		return file
	}
	db := dbtest.New(t)
	boot := func(env map[string]string) *observer.ObservedLogs {
		t.Helper()
		env["HOOKLEDGER_CONFIG"] = cfg
		a, logs := newLogged(t, db, env)
		a.Close()
		return logs
	}

	stale := boot(map[string]string{"PUBLISHED_IPS_FILE": list(time.Now().Add(-90 * 24 * time.Hour)), "PUBLISHED_IPS_MAX_AGE": "720h"})
	warned := stale.FilterMessage(publishedStale).All()
	require.Len(t, warned, 1)
	require.Equal(t, zapcore.WarnLevel, warned[0].Level)
	require.Equal(t, "github", warned[0].ContextMap()["list"])

	fresh := boot(map[string]string{"PUBLISHED_IPS_FILE": list(time.Now().Add(-time.Hour)), "PUBLISHED_IPS_MAX_AGE": "720h"})
	require.Zero(t, fresh.FilterMessage(publishedStale).Len())

	shipped := boot(map[string]string{"PUBLISHED_IPS_MAX_AGE": "1s"})
	require.Zero(t, shipped.FilterMessage(publishedStale).Len(), "the shipped copy is never warned of")
	require.Zero(t, shipped.FilterLevelExact(zapcore.WarnLevel).FilterField(zap.String("list", "github")).Len())
	named := shipped.FilterField(zap.String("from", "shipped")).All()
	require.Len(t, named, 1, "an info line names the shipped copy in use")
	require.Equal(t, zapcore.InfoLevel, named[0].Level)
}

// TestLateClaimCountedAsClaimed: a claim that commits after its delivery
// was answered 503 (here its sender hung up while the claim waited on
// another transaction's row of the same key) is counted in
// hookledger_late_claims_total and as claimed on the console; the row is
// the event, it is applied, and the provider's retry is a duplicate.
func TestLateClaimCountedAsClaimed(t *testing.T) {
	t.Parallel()
	// The claim's deadline only bounds the test: the sender hangs up long
	// before it.
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken, "CLAIM_TIMEOUT": "1m"})
	hold, err := s.db.SQL.Begin()
	require.NoError(t, err)
	defer hold.Rollback() //nolint:errcheck
	_, err = hold.Exec(`INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload)
		VALUES ('stripe', 'evt_late', 'stripe', 'stripe', 'customer.subscription.updated', '{}')`)
	require.NoError(t, err)

	body := subEvent("evt_late", "active", time.Now().Unix())
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nStripe-Signature: %s\r\nContent-Length: %d\r\n\r\n%s",
		signed(body, time.Now()).Get("Stripe-Signature"), len(body), body)
	require.NoError(t, err)
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO webhook_event%'`) == 1
	}, "the claim never waited on the held row")
	require.NoError(t, conn.Close())
	dbtest.Eventually(t, func() bool {
		return s.metricValue(t, `hookledger_deliveries_total{outcome="unavailable",source="stripe"}`) == 1
	}, "the delivery was never answered 503")
	require.NoError(t, hold.Rollback())

	dbtest.Eventually(t, func() bool {
		return s.metricValue(t, `hookledger_late_claims_total{source="stripe"}`) == 1
	}, "the late claim was never counted")
	s.waitSettled(t, "evt_late")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_late' AND payload <> '{}'`), "the late claim is the row")
	require.Zero(t, s.metricValue(t, `hookledger_deliveries_total{outcome="claimed",source="stripe"}`))

	code, out := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, "duplicate", out["status"], "the provider's retry")
	require.Equal(t, 1.0, s.metricValue(t, `hookledger_late_claims_total{source="stripe"}`))

	cells := s.sourceCells(t, "stripe")
	require.Equal(t, "1", cells[1], "the late claim counts as claimed")
	require.Equal(t, "1", cells[2], "the retry as a duplicate")
}
