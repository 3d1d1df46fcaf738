package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/modules/core/intake"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

func init() { retryBase = time.Millisecond }

// applied counts, per event id, how often a handler applied it.
type applied struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *applied) handler(_ context.Context, _ *ledger.Tx, ev *ledger.Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n[ev.EventID]++
	return nil
}

func (a *applied) counts() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]int{}
	for k, v := range a.n {
		out[k] = v
	}
	return out
}

func stripeSource() *intake.Source {
	return &intake.Source{Name: "stripe", Namespace: "stripe", Provider: provider.Stripe}
}

// TestDirectClaimsAsTheReceiverDoes: direct mode turns an event into its
// claim with intake, as the HTTP path does, with no HTTP receiver in
// between: the row is marked replayed with its recorded headers, a second
// delivery is a duplicate, and on a source that dedups bodies the same
// body under another id writes nothing.
func TestDirectClaimsAsTheReceiverDoes(t *testing.T) {
	h := ledgertest.New(t, 0, nil)
	push, err := os.ReadFile("../../../testdata/providers/github/push.default.json")
	require.NoError(t, err)
	sink := &Direct{Source: &intake.Source{Name: "github", Namespace: "github", Provider: provider.GitHub, BodyDedup: true}, Claimer: h.Claimer}
	deliver := func(guid string) bool {
		t.Helper()
		header := http.Header{"X-Github-Delivery": {guid}, "X-Github-Event": {"push"}}
		isNew, err := sink.Deliver(context.Background(), Fetched{ID: guid, Type: "push", Body: push, Header: header})
		require.NoError(t, err)
		return isNew
	}
	require.True(t, deliver("guid-1"))
	require.False(t, deliver("guid-1"), "a second delivery is a duplicate")
	require.False(t, deliver("guid-forged"), "the same body under another id is a replay")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'guid-1' AND replayed AND secret_index IS NULL
		AND body_digest IS NOT NULL AND headers->>'X-Github-Event' = 'push' AND source = 'github'`))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep'`))
}

// TestStripeOutageScenario: an endpoint was down and missed a few of 250
// events in a window; replay claims exactly the missing ones, each is
// applied once, and a second run adds nothing.
func TestStripeOutageScenario(t *testing.T) {
	t.Parallel()
	app := &applied{n: map[string]int{}}
	h := ledgertest.New(t, 4, func(h *ledgertest.Harness) { h.Registry.Handle("stripe", "invoice.*", app.handler) })
	base := time.Now().Add(-time.Hour).Unix()
	fake, srv := newFakeStripe(t, 250, func(i int) int64 { return base + int64(i) })
	missing := map[int]bool{3: true, 77: true, 150: true, 151: true, 249: true}
	for _, e := range fake.events {
		var i int
		fmt.Sscanf(e["id"].(string), "evt_%d", &i)
		if !missing[i] {
			body, _ := json.Marshal(e)
			h.Claim(t, "stripe", e["id"].(string), "invoice.paid", body)
		}
	}
	fake.failures = []int{http.StatusTooManyRequests, http.StatusServiceUnavailable}

	sink := &Direct{Source: stripeSource(), Claimer: h.Claimer}
	o := StripeOptions{APIBase: srv.URL, APIKey: "sk_test_key", Since: time.Unix(base, 0), HTTP: srv.Client()}
	var last Stats
	stats, err := Stripe(context.Background(), o, sink, func(s Stats) { last = s })
	require.NoError(t, err)
	require.Equal(t, Stats{Fetched: 250, New: 5, Duplicate: 245}, stats)
	require.Equal(t, stats, last, "progress saw the final counts")
	require.Len(t, fake.requests, 5, "a 429 and a 503 retried, then three pages of 100")
	require.Contains(t, fake.requests[4], "starting_after=evt_0050")

	for i := range 250 {
		h.WaitSettled(t, "stripe", fmt.Sprintf("evt_%04d", i))
	}
	counts := app.counts()
	require.Len(t, counts, 250)
	for id, n := range counts {
		require.Equal(t, 1, n, "%s applied once", id)
	}
	require.Equal(t, 5, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE replayed AND secret_index IS NULL`))

	again, err := Stripe(context.Background(), o, sink, nil)
	require.NoError(t, err)
	require.Equal(t, Stats{Fetched: 250, Duplicate: 250}, again, "a second run adds nothing")
}

func TestStripeParameters(t *testing.T) {
	t.Parallel()
	fake, srv := newFakeStripe(t, 30, func(i int) int64 { return 1_700_000_000 + int64(i) })
	fake.events[0]["type"] = "customer.subscription.updated"
	got := []string{}
	sink := sinkFunc(func(_ context.Context, ev Fetched) (bool, error) { got = append(got, ev.ID); return true, nil })
	stats, err := Stripe(context.Background(), StripeOptions{
		APIBase: srv.URL, APIKey: "sk_test_key", Since: time.Unix(1_700_000_010, 0), Until: time.Unix(1_700_000_019, 0),
		Types: []string{"invoice.paid"}, FailedOnly: true, HTTP: srv.Client(),
	}, sink, nil)
	require.NoError(t, err)
	require.Equal(t, int64(10), stats.New)
	require.Equal(t, "evt_0019", got[0], "newest first")
	q := fake.requests[0]
	for _, want := range []string{"created%5Bgte%5D=1700000010", "created%5Blte%5D=1700000019", "delivery_success=false", "limit=100", "types%5B%5D=invoice.paid"} {
		require.Contains(t, q, want)
	}
}

func TestStripeGivesUp(t *testing.T) {
	t.Parallel()
	fake, srv := newFakeStripe(t, 1, func(int) int64 { return 1 })
	fake.failures = []int{500, 500, 500, 500, 500, 500, 500}
	_, err := Stripe(context.Background(), StripeOptions{APIBase: srv.URL, APIKey: "sk_test_key", HTTP: srv.Client()}, sinkFunc(nil), nil)
	require.ErrorContains(t, err, "giving up after 6 attempts")

	_, err = Stripe(context.Background(), StripeOptions{APIBase: srv.URL, APIKey: "wrong", HTTP: srv.Client()}, sinkFunc(nil), nil)
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusUnauthorized, apiErr.Status, "a 4xx is not retried")
}

func TestFailedDeliveriesAreCounted(t *testing.T) {
	t.Parallel()
	_, srv := newFakeStripe(t, 3, func(i int) int64 { return 100 + int64(i) })
	sink := sinkFunc(func(_ context.Context, ev Fetched) (bool, error) {
		if ev.ID == "evt_0001" {
			return false, fmt.Errorf("ledger unavailable")
		}
		return true, nil
	})
	stats, err := Stripe(context.Background(), StripeOptions{APIBase: srv.URL, APIKey: "sk_test_key", HTTP: srv.Client()}, sink, nil)
	require.ErrorContains(t, err, "evt_0001: ledger unavailable")
	require.Equal(t, Stats{Fetched: 3, New: 2, Failed: 1}, stats)
}

type sinkFunc func(context.Context, Fetched) (bool, error)

func (f sinkFunc) Deliver(ctx context.Context, ev Fetched) (bool, error) { return f(ctx, ev) }

func TestPaddlePagesAndWindow(t *testing.T) {
	t.Parallel()
	fixture, err := os.ReadFile("../../../testdata/providers/paddle/events-list-response.GET_events.json")
	require.NoError(t, err)
	var page map[string]any
	require.NoError(t, json.Unmarshal(fixture, &page))
	var srv *httptest.Server
	requests := 0
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		if r.Header.Get("Authorization") != "Bearer pdl_key" {
			http.Error(w, "unauthorized", 401)
			return
		}
		p := map[string]any{"data": page["data"], "meta": map[string]any{"pagination": map[string]any{
			"next": srv.URL + "/events?after=evt_x", "has_more": r.URL.Query().Get("after") == "",
		}}}
		if r.URL.Query().Get("after") != "" {
			p["data"] = []any{} // second page: nothing new
		}
		_ = json.NewEncoder(w).Encode(p)
	}))
	defer srv.Close()

	h := ledgertest.New(t, 0, nil)
	sink := &Direct{Source: &intake.Source{Name: "paddle", Namespace: "paddle", Provider: provider.Paddle}, Claimer: h.Claimer}
	o := PaddleOptions{APIBase: srv.URL, APIKey: "pdl_key", Since: time.Date(2023, 11, 24, 14, 12, 0, 0, time.UTC), Until: time.Date(2023, 11, 24, 14, 13, 0, 0, time.UTC), HTTP: srv.Client()}
	stats, err := Paddle(context.Background(), o, sink, nil)
	require.NoError(t, err)
	require.Equal(t, 1, requests, "the page reaches past the window's start: the next is not read")
	require.Equal(t, Stats{Fetched: 7, New: 7}, stats, "the fixture's seven events of 14:12")
	require.Equal(t, int(stats.New), h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'paddle' AND replayed`))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_01hg0trvbgjfp0avfam8a2yzq1'`))
	again, err := Paddle(context.Background(), o, sink, nil)
	require.NoError(t, err)
	require.Equal(t, Stats{Fetched: 7, Duplicate: 7}, again)
}

func TestGitHubRedeliversMissingFailures(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	at := func(minAgo int) string { return now.Add(-time.Duration(minAgo) * time.Minute).Format(time.RFC3339) }
	pages := [][]map[string]any{
		{
			{"id": 9, "guid": "g-ok", "delivered_at": at(1), "status_code": 200, "event": "push"},
			{"id": 8, "guid": "g-missing", "delivered_at": at(2), "status_code": 502, "event": "push"},
		},
		{
			{"id": 7, "guid": "g-missing", "delivered_at": at(3), "status_code": 504, "event": "push"},
			{"id": 6, "guid": "g-in-ledger", "delivered_at": at(4), "status_code": 500, "event": "issues", "action": "opened"},
			{"id": 5, "guid": "g-ok", "delivered_at": at(5), "status_code": 500, "event": "push"},
		},
		{
			{"id": 4, "guid": "g-too-old", "delivered_at": at(600), "status_code": 500, "event": "push"},
		},
	}
	var (
		mu          sync.Mutex
		redelivered []string
		wrongPaths  []string // the server's goroutines report; the test asserts
		srv         *httptest.Server
	)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer ghp_token" {
			http.Error(w, "bad credentials", 401)
			return
		}
		if r.Method == http.MethodPost {
			mu.Lock()
			redelivered = append(redelivered, r.URL.Path)
			mu.Unlock()
			w.WriteHeader(http.StatusAccepted)
			return
		}
		if r.URL.Path != "/repos/acme/api/hooks/42/deliveries" {
			mu.Lock()
			wrongPaths = append(wrongPaths, r.URL.Path)
			mu.Unlock()
			http.NotFound(w, r)
			return
		}
		i := 0
		fmt.Sscanf(r.URL.Query().Get("cursor"), "v1_%d", &i)
		if i+1 < len(pages) {
			w.Header().Set("Link", fmt.Sprintf(`<%s/repos/acme/api/hooks/42/deliveries?per_page=100&cursor=v1_%d>; rel="next"`, srv.URL, i+1))
		}
		_ = json.NewEncoder(w).Encode(pages[i])
	}))
	defer srv.Close()

	o := GitHubOptions{
		APIBase: srv.URL, Token: "ghp_token", Repo: "acme/api", HookID: "42", Since: now.Add(-time.Hour), HTTP: srv.Client(),
		Seen: func(_ context.Context, guid string) (bool, error) { return guid == "g-in-ledger", nil },
	}
	var reported []string
	o.Report = func(d Delivery) { reported = append(reported, fmt.Sprintf("%s/%d", d.GUID, d.ID)) }
	o.DryRun = true
	stats, err := GitHub(context.Background(), o, nil)
	require.NoError(t, err)
	require.Equal(t, Stats{Fetched: 5, New: 1, Duplicate: 1}, stats)
	require.Equal(t, []string{"g-missing/8"}, reported, "the newest attempt of each failed GUID")
	require.Empty(t, redelivered, "dry run")

	o.DryRun = false
	stats, err = GitHub(context.Background(), o, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), stats.New)
	require.Equal(t, []string{"/repos/acme/api/hooks/42/deliveries/8/attempts"}, redelivered)
	require.Empty(t, wrongPaths, "every listing went to the hook's deliveries")
}

// TestReconcileCatchesUpOnItsOwn: the periodic job replays Stripe's
// undelivered events and moves the watermark, with no one running a
// command; its claims insert their apply jobs through the insert
// middleware it was given (tracing, in the service).
func TestReconcileCatchesUpOnItsOwn(t *testing.T) {
	t.Parallel()
	now := time.Now().Unix()
	fake, srv := newFakeStripe(t, 12, func(i int) int64 { return now - 600 + int64(i) })
	var inserted atomic.Int64
	counting := river.JobInsertMiddlewareFunc(func(ctx context.Context, params []*rivertype.JobInsertParams,
		doInner func(context.Context) ([]*rivertype.JobInsertResult, error),
	) ([]*rivertype.JobInsertResult, error) {
		for _, p := range params {
			if strings.HasPrefix(p.Kind, "apply_") {
				inserted.Add(1)
			}
		}
		return doInner(ctx)
	})
	h := ledgertest.New(t, 2, func(h *ledgertest.Harness) {
		RegisterReconcile(h.Registry, ReconcileConfig{
			DB: h.DB.SQL, Source: stripeSource(),
			Stripe:   StripeOptions{APIBase: srv.URL, APIKey: "sk_test_key", HTTP: srv.Client()},
			Interval: time.Hour, Window: time.Hour, Logger: zap.NewNop(),
			Middleware: []rivertype.Middleware{counting},
		})
	})
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM replay_watermark WHERE source = 'stripe'`) == 1
	})
	require.Equal(t, 12, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE replayed`))
	require.Equal(t, int64(12), inserted.Load(), "each claim's apply job went through the middleware")
	require.Contains(t, fake.requests[0], "delivery_success=false")
	wm, err := Watermark(context.Background(), h.DB.SQL, "stripe")
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), wm, time.Minute)
}

// TestPaddleCapSaysTruncatedAndResumes: a run that stops at its page cap
// while Paddle still has more says so, with the event id to go on from;
// a run given it (--after) goes on from there, and stops at the window's
// start without paging the rest of the account's history.
func TestPaddleCapSaysTruncatedAndResumes(t *testing.T) {
	t.Parallel()
	// Paddle's list, newest first: evt_099 (10:00 on 2026-11-30) down to
	// evt_000, one an hour; pages of two, after an id, as Paddle pages them.
	var srv *httptest.Server
	pages := 0
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pages++
		if r.URL.Query().Get("order_by") != "id[DESC]" {
			http.Error(w, "want newest first", http.StatusBadRequest)
			return
		}
		from := 99
		if after := r.URL.Query().Get("after"); after != "" {
			fmt.Sscanf(after, "evt_%03d", &from)
			from--
		}
		var data []any
		for i := from; i > from-2 && i >= 0; i-- {
			at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).Add(-time.Duration(99-i) * time.Hour)
			data = append(data, map[string]any{"event_id": fmt.Sprintf("evt_%03d", i), "event_type": "transaction.updated",
				"occurred_at": at.Format(time.RFC3339), "data": map[string]any{"id": "txn_1"}})
		}
		last := from - 1
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data, "meta": map[string]any{"pagination": map[string]any{
			"next": fmt.Sprintf("%s/events?order_by=id%%5BDESC%%5D&after=evt_%03d", srv.URL, last), "has_more": last > 0}}})
	}))
	defer srv.Close()
	var got []string
	sink := sinkFunc(func(_ context.Context, ev Fetched) (bool, error) { got = append(got, ev.ID); return true, nil })
	// The last ten hours: evt_099 down to evt_090.
	o := PaddleOptions{APIBase: srv.URL, APIKey: "pdl_key", Since: time.Date(2026, 11, 30, 0, 30, 0, 0, time.UTC), HTTP: srv.Client(), MaxPages: 3}
	stats, err := Paddle(context.Background(), o, sink, nil)
	require.ErrorIs(t, err, ErrTruncated)
	require.True(t, stats.Truncated)
	require.Equal(t, "evt_094", stats.Resume)
	require.Contains(t, err.Error(), "--after evt_094")
	require.EqualValues(t, 6, stats.Fetched)

	o.After, o.MaxPages, pages = stats.Resume, 0, 0
	stats, err = Paddle(context.Background(), o, sink, nil)
	require.NoError(t, err)
	require.False(t, stats.Truncated)
	require.EqualValues(t, 4, stats.Fetched, "evt_093 to evt_090")
	require.Equal(t, 3, pages, "it stops at the page that reaches past the window, not at the end of the history")
	var want []string
	for i := 99; i >= 90; i-- {
		want = append(want, fmt.Sprintf("evt_%03d", i))
	}
	require.Equal(t, want, got, "every event of the window once, across both runs")
}
