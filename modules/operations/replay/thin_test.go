package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// fakeThinEvents serves GET /v2/core/events over fixed thin events, newest
// first, 20 a page through next_page_url, as Stripe's API v2 does; it
// checks the bearer key and applies the created window and types.
type fakeThinEvents struct {
	mu       sync.Mutex
	events   []map[string]any // newest first
	queries  []url.Values
	nextPage func(page int) string
}

func newFakeThinEvents(t *testing.T, n int, base time.Time) (*fakeThinEvents, *httptest.Server) {
	f := &fakeThinEvents{nextPage: func(page int) string { return fmt.Sprintf("/v2/core/events?page=p%d", page) }}
	for i := n - 1; i >= 0; i-- {
		f.events = append(f.events, map[string]any{
			"id": fmt.Sprintf("evt_thin_%03d", i), "object": "v2.core.event", "type": "v1.customer.subscription.updated", "livemode": false,
			"created": base.Add(time.Duration(i) * time.Second).UTC().Format("2006-01-02T15:04:05.000Z"), "context": nil,
			"related_object": map[string]any{"id": fmt.Sprintf("sub_%d", i), "type": "subscription", "url": fmt.Sprintf("/v1/subscriptions/sub_%d", i)},
		})
	}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeThinEvents) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer sk_test_key" {
		http.Error(w, `{"error":{"type":"invalid_request_error","code":"unauthorized"}}`, http.StatusUnauthorized)
		return
	}
	if r.URL.Path != "/v2/core/events" {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	f.queries = append(f.queries, q)
	page := 0
	if p := q.Get("page"); p != "" {
		page, _ = strconv.Atoi(p[1:])
		q = f.queries[0] // a page token stands for the first request's filters
	}
	gte, _ := time.Parse(time.RFC3339, q.Get("created[gte]"))
	lte, err := time.Parse(time.RFC3339, q.Get("created[lte]"))
	if err != nil {
		lte = time.Unix(1<<40, 0)
	}
	var matching []map[string]any
	for _, e := range f.events {
		c, _ := time.Parse(time.RFC3339, e["created"].(string))
		if !c.Before(gte) && !c.After(lte) && (len(q["types"]) == 0 || slices.Contains(q["types"], e["type"].(string))) {
			matching = append(matching, e)
		}
	}
	start, end := min(page*20, len(matching)), min(page*20+20, len(matching))
	var next any
	if end < len(matching) {
		next = f.nextPage(page + 1)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"data": matching[start:end], "next_page_url": next, "previous_page_url": nil})
}

// TestStripeThinReplaysMissingThinEvents: thin events are paged from
// /v2/core/events through next_page_url and claimed through the same claim
// as v1 replay: those the ledger has are duplicates, the rest new rows
// marked replayed; a second run adds nothing.
func TestStripeThinReplaysMissingThinEvents(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	fake, srv := newFakeThinEvents(t, 45, base)
	for _, e := range fake.events[:5] {
		body, _ := json.Marshal(e)
		h.Claim(t, "stripe", e["id"].(string), e["type"].(string), body)
	}
	sink := &Direct{Source: stripeSource(), Claimer: h.Claimer}
	o := StripeOptions{APIBase: srv.URL, APIKey: "sk_test_key", Since: base.Add(5 * time.Second), HTTP: srv.Client(),
		Types: []string{"v1.customer.subscription.updated", "v1.invoice.paid"}, FailedOnly: true}
	stats, err := StripeThin(context.Background(), o, sink, nil)
	require.NoError(t, err)
	require.Equal(t, Stats{Fetched: 40, New: 35, Duplicate: 5}, stats, "evt_thin_005 to evt_thin_044")
	require.Len(t, fake.queries, 2, "two pages")
	first := fake.queries[0]
	require.Equal(t, base.Add(5*time.Second).UTC().Format(time.RFC3339), first.Get("created[gte]"))
	require.Equal(t, []string{"v1.customer.subscription.updated", "v1.invoice.paid"}, first["types"], "an array's parameter repeated")
	require.Empty(t, first.Get("delivery_success"), "API v2 has no delivery filter")
	require.Equal(t, "p1", fake.queries[1].Get("page"))
	require.Equal(t, 35, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE replayed AND namespace = 'stripe'
		AND event_type = 'v1.customer.subscription.updated' AND (payload::jsonb)->>'object' = 'v2.core.event'`))

	again, err := StripeThin(context.Background(), o, sink, nil)
	require.NoError(t, err)
	require.Equal(t, Stats{Fetched: 40, Duplicate: 40}, again)
}

// TestStripeThinStaysOnTheEventsList: a next_page_url that leads to
// another host or endpoint ends the run with an error, without a request
// to it.
func TestStripeThinStaysOnTheEventsList(t *testing.T) {
	t.Parallel()
	fake, srv := newFakeThinEvents(t, 30, time.Now().Add(-time.Hour))
	for _, next := range []string{"https://elsewhere.example/v2/core/events?page=p1", "/v1/customers?page=p1", "//elsewhere.example/v2/core/events"} {
		fake.nextPage = func(int) string { return next }
		var got []string
		sink := sinkFunc(func(_ context.Context, ev Fetched) (bool, error) { got = append(got, ev.ID); return true, nil })
		stats, err := StripeThin(context.Background(), StripeOptions{APIBase: srv.URL, APIKey: "sk_test_key", Since: time.Now().Add(-2 * time.Hour), HTTP: srv.Client()}, sink, nil)
		require.ErrorContains(t, err, "next_page_url", next)
		require.Equal(t, int64(20), stats.Fetched, "the first page was delivered")
		require.Len(t, got, 20)
	}
	_, err := StripeThin(context.Background(), StripeOptions{APIBase: srv.URL, APIKey: "wrong", HTTP: srv.Client()}, sinkFunc(nil), nil)
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusUnauthorized, apiErr.Status)
}
