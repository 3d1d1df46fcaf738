package replay

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
)

// fakeStripe serves GET /v1/events over a fixed set of events, newest
// first, as Stripe does; it checks the key and can rate-limit or fail.
type fakeStripe struct {
	mu       sync.Mutex
	events   []map[string]any // newest first
	requests []string
	// failures are answered before real pages, one per request.
	failures []int
}

func newFakeStripe(t *testing.T, n int, created func(i int) int64) (*fakeStripe, *httptest.Server) {
	f := &fakeStripe{}
	for i := n - 1; i >= 0; i-- {
		f.events = append(f.events, map[string]any{
			"id": fmt.Sprintf("evt_%04d", i), "object": "event", "type": "invoice.paid", "created": created(i),
			"data": map[string]any{"object": map[string]any{"id": fmt.Sprintf("in_%d", i)}},
		})
	}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeStripe) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.URL.RawQuery)
	if user, _, ok := r.BasicAuth(); !ok || user != "sk_test_key" {
		http.Error(w, `{"error":{"message":"Invalid API Key"}}`, http.StatusUnauthorized)
		return
	}
	if len(f.failures) > 0 {
		code := f.failures[0]
		f.failures = f.failures[1:]
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "0")
		}
		http.Error(w, `{"error":{"message":"try later"}}`, code)
		return
	}
	q := r.URL.Query()
	if r.URL.Path != "/v1/events" {
		http.NotFound(w, r)
		return
	}
	limit, _ := strconv.Atoi(q.Get("limit"))
	gte, _ := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
	lte, err := strconv.ParseInt(q.Get("created[lte]"), 10, 64)
	if err != nil {
		lte = 1 << 62
	}
	var matching []map[string]any
	for _, e := range f.events {
		c := e["created"].(int64)
		if c >= gte && c <= lte && (len(q["types[]"]) == 0 || slices.Contains(q["types[]"], e["type"].(string))) {
			matching = append(matching, e)
		}
	}
	start := 0
	if after := q.Get("starting_after"); after != "" {
		for i, e := range matching {
			if e["id"] == after {
				start = i + 1
			}
		}
	}
	end := min(start+limit, len(matching))
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": matching[start:end], "has_more": end < len(matching)})
}
