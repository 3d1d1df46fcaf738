package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// crawlLimit bounds the pages the crawl visits; the ledger the crawl test
// writes links far fewer.
const crawlLimit = 300

// planEvent is a Stripe subscription update on its own subscription with
// the given plan.
func planEvent(id, plan string, at time.Time) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"customer.subscription.updated","created":%d,`+
		`"data":{"object":{"id":"sub_%s","customer":"cus_crawl","status":"active","items":{"data":[{"price":{"id":%q}}]}}}}`,
		id, at.Unix(), url.PathEscape(id), plan))
}

// claim delivers a signed Stripe event and requires it claimed.
func (s *server) claim(t *testing.T, body []byte, header http.Header) {
	t.Helper()
	if header == nil {
		header = signed(body, time.Now())
	}
	code, out := s.post(t, "/webhooks/stripe", body, header)
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, "claimed", out["status"], "%v", out)
}

// refuseBrokenPlan makes the database refuse the subscription plan
// price_broken until lift is called: a handler failure an operator fixes.
func refuseBrokenPlan(t *testing.T, s *server) (lift func()) {
	t.Helper()
	_, err := s.db.SQL.Exec(`ALTER TABLE subscription ADD CONSTRAINT no_broken_plan CHECK (plan <> 'price_broken')`)
	require.NoError(t, err)
	return func() {
		_, err := s.db.SQL.Exec(`ALTER TABLE subscription DROP CONSTRAINT no_broken_plan`)
		require.NoError(t, err)
	}
}

// parkRetries moves the pending automatic retry of a failed event an hour
// away (caught while its job waits, never while it runs): the event stays
// failed until an operator requeues it.
func parkRetries(t *testing.T, s *server, id string) {
	t.Helper()
	dbtest.Eventually(t, func() bool { return status(t, s, id) == "failed" }, "%s never failed", id)
	dbtest.Eventually(t, func() bool { return parkRetry(t, s, id) }, "the failing job of %s never waited for a retry", id)
	require.Equal(t, "failed", status(t, s, id))
}

// parkRetry moves the failed apply job of id, if it waits for its retry
// right now, an hour away, and reports whether it did. A retry due within
// River's scheduler interval (5 s: the first three, 1 s, 2 s and 4 s after
// a failure) waits as available, not retryable; waiting for one River
// makes retryable would wait out those three retries. Parked, the job is
// retryable an hour away, as River leaves a job whose next retry is far.
func parkRetry(t *testing.T, s *server, id string) bool {
	t.Helper()
	res, err := s.db.SQL.Exec(`UPDATE river_job SET state = 'retryable', scheduled_at = now() + interval '1 hour'
		WHERE state IN ('available', 'scheduled', 'retryable') AND attempt > 0
			AND kind = 'apply_event' AND args->>'event_id' = $1`, id)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	return n == 1
}

// crawled is one console page the crawl fetched.
type crawled struct {
	code int
	body string
	// from is the page that linked it.
	from string
}

// crawlConsole fetches /console/ with the operator's credentials and
// every console URL reachable from it, breadth first: the links (<a>,
// <link>), and the GET forms submitted with their fields as rendered. It
// follows redirects within the console itself, and returns every URL
// fetched, keyed by path and query.
func crawlConsole(t *testing.T, s *server) map[string]crawled {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	seen := map[string]crawled{}
	queue := []string{"/console/"}
	from := map[string]string{"/console/": "(start)"}
	enqueue := func(page, ref string) {
		u, err := url.Parse(page)
		require.NoError(t, err)
		target, err := u.Parse(ref)
		require.NoError(t, err, "%s links %q", page, ref)
		if target.Host != "" && target.Host != strings.TrimPrefix(s.base, "http://") {
			return
		}
		if target.Path != "/console" && !strings.HasPrefix(target.Path, "/console/") {
			return // River UI and anything else beside the console
		}
		key := target.EscapedPath()
		if q := target.Query(); len(q) > 0 {
			key += "?" + q.Encode()
		}
		if _, ok := from[key]; ok {
			return
		}
		from[key] = page
		queue = append(queue, key)
	}
	for len(queue) > 0 {
		require.Less(t, len(seen), crawlLimit, "the console links more than %d pages: the crawl is bounded", crawlLimit)
		path := queue[0]
		queue = queue[1:]
		req, err := http.NewRequest(http.MethodGet, s.base+path, nil)
		require.NoError(t, err)
		basic(adminToken)(req)
		resp, err := client.Do(req)
		require.NoError(t, err, path)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err, path)
		seen[path] = crawled{code: resp.StatusCode, body: string(raw), from: from[path]}
		if loc := resp.Header.Get("Location"); resp.StatusCode/100 == 3 && loc != "" {
			enqueue(path, loc)
		}
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			continue
		}
		for _, ref := range pageLinks(t, string(raw)) {
			enqueue(path, ref)
		}
	}
	return seen
}

// pageLinks lists the URLs a page leads a browser to with a GET: its links
// and stylesheets, and each GET form's action with its fields as rendered.
func pageLinks(t *testing.T, page string) []string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	require.NoError(t, err)
	attr := func(n *html.Node, name string) (string, bool) {
		for _, a := range n.Attr {
			if a.Key == name {
				return a.Val, true
			}
		}
		return "", false
	}
	var links []string
	var form func(n *html.Node, q url.Values)
	form = func(n *html.Node, q url.Values) {
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type != html.ElementNode {
				continue
			}
			name, named := attr(c, "name")
			switch c.Data {
			case "input":
				if named {
					v, _ := attr(c, "value")
					q.Add(name, v)
				}
				continue
			case "select":
				if named {
					q.Add(name, selected(c, attr))
				}
				continue
			}
			form(c, q)
		}
	}
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "a", "link":
				if href, ok := attr(n, "href"); ok {
					links = append(links, href)
				}
			case "form":
				method, _ := attr(n, "method")
				if method == "" || strings.EqualFold(method, "get") {
					action, _ := attr(n, "action")
					q := url.Values{}
					form(n, q)
					links = append(links, action+"?"+q.Encode())
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return links
}

// selected is the value a select submits as rendered: its selected
// option, else its first.
func selected(sel *html.Node, attr func(*html.Node, string) (string, bool)) string {
	var first, chosen *html.Node
	var find func(*html.Node)
	find = func(n *html.Node) {
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type == html.ElementNode && c.Data == "option" {
				if first == nil {
					first = c
				}
				if _, ok := attr(c, "selected"); ok && chosen == nil {
					chosen = c
				}
			}
			find(c)
		}
	}
	find(sel)
	if chosen == nil {
		chosen = first
	}
	if chosen == nil {
		return ""
	}
	if v, ok := attr(chosen, "value"); ok {
		return v
	}
	var text strings.Builder
	for c := chosen.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.TextNode {
			text.WriteString(c.Data)
		}
	}
	return strings.TrimSpace(text.String())
}

// listedIDs follows a list page and its next-page links, and returns the
// event ids of every row, in order.
func listedIDs(t *testing.T, s *server, path string) (ids []string, pages int) {
	t.Helper()
	for path != "" {
		code, body, _ := s.page(t, path, basic(adminToken))
		require.Equal(t, http.StatusOK, code, path)
		pages++
		require.LessOrEqual(t, pages, 20, "the next-page links of %s never end", path)
		doc, err := html.Parse(strings.NewReader(body))
		require.NoError(t, err)
		path = ""
		var walk func(*html.Node)
		walk = func(n *html.Node) {
			if n.Type == html.ElementNode && n.Data == "a" {
				var href, id string
				for _, a := range n.Attr {
					switch a.Key {
					case "href":
						href = a.Val
					case "id":
						id = a.Val
					}
				}
				if u, err := url.Parse(href); err == nil && u.Path == "/console/event" {
					ids = append(ids, u.Query().Get("id"))
				}
				if id == "next" {
					path = href
				}
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				walk(c)
			}
		}
		walk(doc)
	}
	return ids, pages
}

// TestConsoleCrawl writes a ledger with rows in every state an operator
// meets (settled, replayed, unhandled, failed for real, discarded, and
// more failed events than one page holds), then follows every link and
// GET form of the console from /console/: no page it links answers 404
// or 5xx. The failed list shows every failed event across its pages, and
// its bulk requeue's confirmation counts them.
func TestConsoleCrawl(t *testing.T) {
	t.Parallel()
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken, "REPLAY_TOKEN": "crawl-replay"})
	refuseBrokenPlan(t, s)
	now := time.Now()

	// Settled, one of them with an id that needs escaping in a link.
	settled := []string{"evt_crawl_settled_1", "evt_crawl_settled_2", "evt_crawl/a&b?c#d e%"}
	for _, id := range settled {
		s.claim(t, planEvent(id, "price_pro", now), nil)
	}
	// Replayed: no signature, the replay token.
	s.claim(t, planEvent("evt_crawl_replayed", "price_pro", now), http.Header{"X-Replay-Token": {"crawl-replay"}})
	// Unhandled: a Stripe type no module applies.
	unhandled := []byte(fmt.Sprintf(`{"id":"evt_crawl_unhandled","object":"event","type":"customer.created","created":%d,"data":{"object":{"id":"cus_crawl"}}}`, now.Unix()))
	s.claim(t, unhandled, nil)
	// Failed for real: the database refuses its plan.
	s.claim(t, planEvent("evt_crawl_broken", "price_broken", now), nil)
	// Discarded: a poison event (no subscription object) put away with a
	// reason.
	s.claim(t, []byte(fmt.Sprintf(`{"id":"evt_crawl_discarded","object":"event","type":"customer.subscription.updated","created":%d,"data":{"object":{}}}`,
		now.Unix())), nil)
	// Enough failed events for two pages of the failed list: applied, then
	// marked failed as a handler's failure leaves them.
	var bulk []string
	for i := range 56 {
		id := fmt.Sprintf("evt_crawl_bulk_%02d", i)
		bulk = append(bulk, id)
		s.claim(t, planEvent(id, "price_pro", now), nil)
	}
	for _, id := range append(append(settled, "evt_crawl_replayed", "evt_crawl_unhandled"), bulk...) {
		s.waitSettled(t, id)
	}
	parkRetries(t, s, "evt_crawl_broken")
	dbtest.Eventually(t, func() bool { return status(t, s, "evt_crawl_discarded") == "failed" }, "the poison event never failed")
	code, out := s.post(t, "/admin/events/evt_crawl_discarded/discard", discardBody("poison: no subscription object"), discardHeaders(bearer(adminToken)))
	require.Equal(t, http.StatusOK, code, "%v", out)
	require.Equal(t, "discarded", status(t, s, "evt_crawl_discarded"))
	_, err := s.db.SQL.Exec(`UPDATE webhook_event SET status = 'failed', settled_at = NULL, attempts = 3, failing_since = now() - interval '5 minutes',
		last_error = 'subscription: upstream answered 503 <Service Unavailable>' WHERE event_id LIKE 'evt_crawl_bulk_%'`)
	require.NoError(t, err)
	failed := s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'failed'`)
	require.Equal(t, len(bulk)+1, failed)

	pages := crawlConsole(t, s)
	t.Logf("crawled %d console URLs", len(pages))
	var broken []string
	for path, p := range pages {
		if p.code == http.StatusNotFound || p.code >= 500 {
			broken = append(broken, fmt.Sprintf("%s: %d (linked from %s): %.200s", path, p.code, p.from, p.body))
		}
	}
	sort.Strings(broken)
	require.Empty(t, broken, "console pages that answer 404 or 5xx")

	// The crawl reached the pages an operator goes through.
	var paths []string
	for path := range pages {
		paths = append(paths, path)
	}
	for _, want := range []string{
		"/console/", "/console/events", "/console/failed", "/console/failed/confirm", "/console/static/console.css",
		"/console/event?" + url.Values{"namespace": {"stripe"}, "id": {"evt_crawl/a&b?c#d e%"}}.Encode(),
		"/console/event?id=evt_crawl_unhandled&namespace=stripe",
		"/console/event?id=evt_crawl_broken&namespace=stripe",
		"/console/event?id=evt_crawl_bulk_00&namespace=stripe",
		"/console/event?id=evt_crawl_discarded&namespace=stripe",
		"/console/events?status=discarded",
	} {
		require.Contains(t, paths, want)
		require.Equal(t, http.StatusOK, pages[want].code, want)
	}
	require.True(t, slices.ContainsFunc(paths, func(p string) bool { return strings.HasPrefix(p, "/console/failed?after=") }),
		"the failed list's second page was linked: %v", paths)
	require.Contains(t, pages["/console/event?id=evt_crawl_unhandled&namespace=stripe"].body, `<td id="status" class="status-settled">settled</td>`)
	require.Contains(t, pages["/console/event?id=evt_crawl_broken&namespace=stripe"].body, "no_broken_plan")
	require.Contains(t, pages["/console/event?id=evt_crawl_unhandled&namespace=stripe"].body, "none matched: unhandled")
	require.Contains(t, pages["/console/event?id=evt_crawl_discarded&namespace=stripe"].body, `<td id="discard-reason">poison: no subscription object</td>`)
	settledList := pages["/console/events?status=settled"]
	require.Equal(t, http.StatusOK, settledList.code)
	require.Equal(t, 1, strings.Count(settledList.body, `settled · <span class="tag unhandled">unhandled</span>`), "the unhandled event, and only it, is marked")

	// The failed list: its count, and every failed event once across its
	// pages; the bulk requeue's confirmation counts them all.
	require.Contains(t, pages["/console/failed"].body, fmt.Sprintf(`<small id="failed-total">%d</small>`, failed))
	ids, n := listedIDs(t, s, "/console/failed")
	require.Equal(t, 2, n, "%d failed events take two pages", failed)
	want := append([]string{"evt_crawl_broken"}, bulk...)
	require.ElementsMatch(t, want, ids)
	require.Contains(t, pages["/console/failed/confirm"].body, fmt.Sprintf(`<strong id="confirm-count">%d</strong>`, failed))
	ids, _ = listedIDs(t, s, "/console/events?status=failed")
	require.ElementsMatch(t, want, ids, "the events page filtered to failed shows the same rows")
	ids, _ = listedIDs(t, s, "/console/events")
	require.Len(t, ids, len(settled)+3+len(want), "every row of the ledger once")
	ids, _ = listedIDs(t, s, "/console/events?status=discarded")
	require.Equal(t, []string{"evt_crawl_discarded"}, ids)
	require.Contains(t, pages["/console/events?status=discarded"].body, "discarded: poison: no subscription object")

	code, _, _ = s.page(t, "/console/failed?after=nope", basic(adminToken))
	require.Equal(t, http.StatusBadRequest, code)
}

// open navigates the browser to a console page and requires it served:
// a page that answers an error fails the test at once, not after a wait
// for an element it lacks.
func open(t *testing.T, ctx context.Context, page string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(page))
	require.NoError(t, err, page)
	require.Equal(t, int64(http.StatusOK), resp.Status, "%s answered %d %s", page, resp.Status, resp.StatusText)
	require.NoError(t, chromedp.Do(ctx, steps...), page)
}

// TestConsoleFailedPageInABrowser opens the failed events page in Chromium
// with none, then one: its count and row; then fixes the cause and
// requeues from the page's bulk action, and the event settles.
func TestConsoleFailedPageInABrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := start(t, map[string]string{"ADMIN_TOKEN": adminToken})
	lift := refuseBrokenPlan(t, s)
	now := time.Now()
	s.claim(t, planEvent("evt_failed_page_ok", "price_pro", now), nil)
	s.waitSettled(t, "evt_failed_page_ok")

	failedPage := s.base + "/console/failed"
	open(t, ctx, failedPage, chromedp.WaitVisible(chromedp.CSS("#failed-total")))
	require.Equal(t, "0", text(t, ctx, "#failed-total"))
	require.Contains(t, text(t, ctx, "table.events"), "No events.")
	require.NotContains(t, text(t, ctx, "main"), "Requeue all", "nothing to requeue")

	s.claim(t, planEvent("evt_failed_page_broken", "price_broken", now), nil)
	parkRetries(t, s, "evt_failed_page_broken")
	open(t, ctx, failedPage, chromedp.WaitVisible(chromedp.CSS("#failed-total")))
	require.Equal(t, "1", text(t, ctx, "#failed-total"))
	rows := text(t, ctx, "table.events")
	require.Contains(t, rows, "evt_failed_page_broken")
	require.Contains(t, rows, "no_broken_plan", "the row says why")
	require.NotContains(t, rows, "evt_failed_page_ok", "settled events are not listed")

	// The row leads to the event's page.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(`//td/a[text()="evt_failed_page_broken"]`),
		chromedp.WaitVisible(chromedp.CSS("#status")),
	))
	require.Equal(t, "evt_failed_page_broken", text(t, ctx, "#event-id"))
	require.Equal(t, "failed", text(t, ctx, "#status"))

	// Fix the cause; the bulk requeue asks first, then settles it.
	lift()
	open(t, ctx, failedPage)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#bulk")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-count")),
	))
	require.Equal(t, "1", text(t, ctx, "#confirm-count"))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#result"))))
	require.Equal(t, "1 requeued, 0 already being applied, 0 skipped.", text(t, ctx, "#result"))
	deadline := time.Now().Add(dbtest.Patience)
	for {
		open(t, ctx, failedPage, chromedp.WaitVisible(chromedp.CSS("#failed-total")))
		if text(t, ctx, "#failed-total") == "0" && status(t, s, "evt_failed_page_broken") == "settled" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the requeued event never settled")
	}
	require.Contains(t, text(t, ctx, "table.events"), "No events.")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE plan = 'price_broken'`))
}
