package app_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// chromium returns the path of Debian's Chromium, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("browser tests need Chromium: apt-get install -y chromium")
	return ""
}

// browser starts a headless Chromium of the test's own that sends the
// admin token as basic auth with every request, as a logged-in operator's
// browser does.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	login := "Basic " + base64.StdEncoding.EncodeToString([]byte("ops:"+adminToken))
	_, err := chromedp.Call(ctx, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	_, err = chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": login}})
	require.NoError(t, err)
	return ctx
}

// text is the text of the element the CSS selector finds.
func text(t *testing.T, ctx context.Context, css string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css)))
	require.NoError(t, err)
	return strings.TrimSpace(s)
}

// TestConsoleInABrowser drives the console in Chromium after a real run of
// deliveries: the overview's counts, a filter, an event's page, a requeue
// that settles a failed event, and a cross-site POST that is refused.
// UPDATE_SCREENSHOT=1 also writes the overview to docs/console.png.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken, "CLAIM_MODE": "log-only"})
	// One subscription plan the database refuses until the test lifts it:
	// a handler failure the console's requeue then settles.
	_, err := s.db.SQL.Exec(`ALTER TABLE subscription ADD CONSTRAINT no_broken_plan CHECK (plan <> 'price_broken')`)
	require.NoError(t, err)

	now := time.Now()
	sub := func(id, plan string) []byte {
		return []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"customer.subscription.updated","created":%d,`+
			`"data":{"object":{"id":"sub_%s","customer":"cus_b","status":"active","items":{"data":[{"price":{"id":%q}}]}}}}`, id, now.Unix(), id, plan))
	}
	var ids []string
	for i := range 24 {
		ids = append(ids, fmt.Sprintf("evt_browser_%02d", i))
	}
	deliver := func(body []byte, want string) {
		code, out := s.post(t, "/webhooks/stripe", body, signed(body, now))
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, want, out["status"])
	}
	for _, id := range ids {
		deliver(sub(id, "price_pro"), "claimed")
	}
	for _, id := range ids[:5] {
		deliver(sub(id, "price_pro"), "duplicate")
	}
	deliver(sub("evt_browser_broken", "price_broken"), "claimed")
	for range 2 {
		code, _ := s.post(t, "/webhooks/stripe", sub("evt_forged", "price_pro"), http.Header{"Stripe-Signature": {"t=1,v1=00"}})
		require.Equal(t, http.StatusUnauthorized, code)
	}
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`) == len(ids) &&
			s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_browser_broken' AND status = 'failed'`) == 1
	}, "the run settles, but for the broken plan")

	// The overview, populated by the run.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(s.base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#total-claimed"))))
	require.Equal(t, "25", text(t, ctx, "#total-claimed"))
	require.Equal(t, "5", text(t, ctx, "#total-duplicate"))
	require.Equal(t, "2", text(t, ctx, "#total-invalid"))
	require.Equal(t, "16.67%", text(t, ctx, "#dup-rate"), "5 duplicates of 30 verified deliveries")
	require.Equal(t, "5", text(t, ctx, "#would-skip"), "log-only's banner")
	require.Contains(t, text(t, ctx, "#backlog"), "failed\t1")
	// Each secret is named by its position and its fingerprint.
	key := fingerprintKey(t, s.db)
	require.Contains(t, text(t, ctx, "#sources"), "#1 "+provider.SecretFingerprint(key, []byte(secret))+": 25", "the second configured secret is the one matching")
	require.Contains(t, text(t, ctx, "#sources"), "#0 "+provider.SecretFingerprint(key, []byte("whsec_other_secret"))+": 0 (unused)")
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "console.png")
	if os.Getenv("UPDATE_SCREENSHOT") != "" {
		out = "../docs/console.png"
	}
	require.NoError(t, os.WriteFile(out, shot, 0o644))

	// Events, filtered to the failed one.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(s.base+"/console/events"),
		chromedp.SetValue(chromedp.CSS(`select[name="status"]`), "failed"),
		chromedp.Click(chromedp.CSS("#apply-filter")),
		// The filtered page, not the one the filter was set on.
		chromedp.WaitReady(`//select[@name="status"]/option[@selected][text()="failed"]`),
	))
	rows := text(t, ctx, "table.events")
	require.Contains(t, rows, "evt_browser_broken")
	require.NotContains(t, rows, "evt_browser_00", "the filter shows failed events only")

	// Its page: the handler's error and its River job.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(`//td/a[text()="evt_browser_broken"]`),
		chromedp.WaitVisible(chromedp.CSS("#status")),
	))
	require.Equal(t, "failed", text(t, ctx, "#status"))
	require.Contains(t, text(t, ctx, "#last-error"), "no_broken_plan")
	require.Contains(t, text(t, ctx, "#payload"), `"price_broken"`)
	jobLink, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#job a"), "href"))
	require.NoError(t, err)
	require.Regexp(t, `^/riverui/jobs/\d+$`, jobLink.Value, "the event links to its job in River UI")
	detail := s.base + "/console/event?namespace=stripe&id=evt_browser_broken"

	// Another site's form posting the requeue with the operator's
	// credentials is refused, and changes nothing.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%s/console/event/requeue"><input type="hidden" name="namespace" value="stripe">`+
			`<input type="hidden" name="id" value="evt_browser_broken"><button id="go">win a prize</button></form>`, s.base)
	}))
	defer evil.Close()
	// Its automatic retries go on meanwhile (attempts grow), but only a
	// requeue resets the start of its failure streak.
	failingSince := func() string {
		var at string
		require.NoError(t, s.db.SQL.QueryRow(`SELECT failing_since::text FROM webhook_event WHERE event_id = 'evt_browser_broken'`).Scan(&at))
		return at
	}
	since := failingSince()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)),
		chromedp.Click(chromedp.CSS("#go")),
		chromedp.WaitVisible(`//pre[contains(., "same-origin")]`),
	))
	require.Contains(t, text(t, ctx, "body"), "a state-changing request with basic auth needs", "the cross-site POST gets the 403 answer")
	require.Equal(t, "failed", status(t, s, "evt_browser_broken"))
	require.Equal(t, since, failingSince(), "not requeued")

	// Park its automatic retries (an hour away, caught while the job waits
	// for one, never while it runs), so the requeue below is the operator's
	// and not answered "applying right now" by a retry that started first.
	dbtest.Eventually(t, func() bool { return parkRetry(t, s, "evt_browser_broken") }, "the failing job never waited for a retry")

	// Fix the cause, requeue from the event's page, and see it settle.
	_, err = s.db.SQL.Exec(`ALTER TABLE subscription DROP CONSTRAINT no_broken_plan`)
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(detail),
		chromedp.Click(chromedp.CSS("#requeue")),
		chromedp.WaitVisible(chromedp.CSS("#done")),
	))
	require.Contains(t, text(t, ctx, "#done"), "Requeued")
	deadline := time.Now().Add(dbtest.Patience)
	for text(t, ctx, "#status") != "settled" {
		require.True(t, time.Now().Before(deadline), "the requeued event never settled")
		require.NoError(t, chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#status"))))
	}
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE plan = 'price_broken'`))
}
