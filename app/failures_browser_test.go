package app_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/operations/admin"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestDiscardFailureGroupInABrowser: poison events of one cause are one
// group on the Failed page; its page discards them all with the reason
// typed in, and reports each; the group is gone afterwards. Without a
// reason the console answers 400, an unknown group 404, and nothing
// changes.
func TestDiscardFailureGroupInABrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	const n = 3
	now := time.Now()
	for i := range n {
		body := []byte(fmt.Sprintf(`{"id":"evt_poison_group_%d","object":"event","type":"customer.subscription.updated","created":%d,"data":{"object":{}}}`, i, now.Unix()))
		code, out := s.post(t, "/webhooks/stripe", body, signed(body, now))
		require.Equal(t, http.StatusOK, code, "%v", out)
	}
	dbtest.Eventually(t, func() bool {
		return s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'failed'`) == n
	}, "the poison events never failed")

	open(t, ctx, s.base+"/console/failed", chromedp.WaitVisible(chromedp.CSS("#groups a.act")))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#groups a.act")), chromedp.WaitVisible(chromedp.CSS("#group-count"))))
	require.Equal(t, fmt.Sprint(n), text(t, ctx, "#group-count"))
	groupURL, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	id := mustQuery(t, groupURL, "id")

	// Refusals, as a form without the browser's checks would meet them.
	form := url.Values{"id": {id}, "confirm": {"yes"}, "reason": {" "}, "csrf_token": {admin.CSRFToken(adminToken)}}
	resp := s.postForm(t, "/console/failed/group/discard", form, discardHeaders(basic(adminToken)))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	form.Set("id", "0123456789abcdef")
	form.Set("reason", "gone")
	resp = s.postForm(t, "/console/failed/group/discard", form, discardHeaders(basic(adminToken)))
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	code, _, _ := s.page(t, "/console/failed/group?id=0123456789abcdef", basic(adminToken))
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, n, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'failed'`))

	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#reason"), "poison: no subscription object"),
		chromedp.Click(chromedp.CSS("#discard-group")),
		chromedp.WaitVisible(chromedp.CSS("#result")),
	))
	require.Equal(t, fmt.Sprintf("%d discarded", n), text(t, ctx, "#result"))
	outcomes, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSSAll("#outcomes tr td:nth-child(2)")))
	require.NoError(t, err)
	require.Len(t, outcomes, n, "a line per event")
	require.Equal(t, n, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'discarded' AND discard_reason = 'poison: no subscription object'`))
	open(t, ctx, s.base+"/console/failed", chromedp.WaitVisible(chromedp.CSS("#groups")))
	require.Contains(t, text(t, ctx, "#groups"), "No failed events.")
}

// mustQuery is the value of key in the query of the URL raw.
func mustQuery(t *testing.T, raw, key string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	v := u.Query().Get(key)
	require.NotEmpty(t, v, "%s has no %s", raw, key)
	return v
}
