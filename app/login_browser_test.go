package app_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestLoginRiverUIAndFailureGroupsInABrowser: a browser that sends no
// credentials of its own (TestConsoleLogin: River UI answers it 401)
// logs in through the console's form, and then River UI's Retryable list loads its jobs
// (River UI's API accepts the session cookie); the console's Failed page
// shows the failing events as one group, its page says how many a
// requeue touches, the event page says what River UI's buttons do, and
// requeueing the group once the cause is fixed settles every event; the
// logout leads back to the login form. UPDATE_SCREENSHOT=1 also writes
// the Failed page's groups to docs/console-failed.png.
func TestLoginRiverUIAndFailureGroupsInABrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	_, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{}})
	require.NoError(t, err)
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	lift := refuseBrokenPlan(t, s)
	const n = 3
	for i := range n {
		discardFailingEvent(t, s, fmt.Sprintf("evt_browser_group_%d", i))
	}

	open(t, ctx, s.base+"/console/login", chromedp.WaitVisible(chromedp.CSS("#token")))
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#token"), adminToken),
		chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#total-claimed")),
	))

	// River UI's Retryable list, from the console's navigation: its jobs
	// load through River UI's API with the session cookie.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#riverui-retryable")),
		chromedp.WaitVisible(`//a[@href="/riverui/jobs?state=retryable"][@aria-current="page"]`),
		chromedp.WaitVisible(`//li[.//a[normalize-space(.)="apply_event"]][.//p[contains(., '"event_id":"evt_browser_group_0"')]]`),
	))

	// The Failed page: one group of the three, and its actions.
	open(t, ctx, s.base+"/console/failed", chromedp.WaitVisible(chromedp.CSS("#groups tr.group")))
	groups, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSSAll("#groups tr.group")))
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.Equal(t, fmt.Sprint(n), text(t, ctx, "#groups tr.group td.count"))
	require.Contains(t, text(t, ctx, "#groups tr.group td.err"), `violates check constraint "…"`)
	screenshot(t, ctx, "console-failed.png")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#groups a.act")), chromedp.WaitVisible(chromedp.CSS("#group-count"))))
	require.Equal(t, fmt.Sprint(n), text(t, ctx, "#group-count"))
	require.Equal(t, fmt.Sprintf("Requeue %d events", n), text(t, ctx, "#requeue-group"))

	// Its sample event's page says what River UI's buttons do.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(`//th[normalize-space(.)="sample event"]/following-sibling::td/a`),
		chromedp.WaitVisible(chromedp.CSS("#riverui-buttons")),
	))
	buttons := text(t, ctx, "#riverui-buttons")
	for _, b := range []string{"Retry", "Cancel", "Delete", "sweep"} {
		require.Contains(t, buttons, b)
	}
	open(t, ctx, s.base+"/console/failed", chromedp.WaitVisible(chromedp.CSS("#groups a.act")))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#groups a.act")), chromedp.WaitVisible(chromedp.CSS("#requeue-group"))))

	lift()
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#requeue-group")), chromedp.WaitVisible(chromedp.CSS("#result"))))
	require.Contains(t, text(t, ctx, "#result"), fmt.Sprintf("%d requeued", n))
	for i := range n {
		s.waitSettled(t, fmt.Sprintf("evt_browser_group_%d", i))
	}
	open(t, ctx, s.base+"/console/failed", chromedp.WaitVisible(chromedp.CSS("#groups")))
	require.Contains(t, text(t, ctx, "#groups"), "No failed events.")

	// Log out: back on the login form (TestConsoleLogin: the cookie is
	// cleared).
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#logout")), chromedp.WaitVisible(chromedp.CSS("#token"))))
}
