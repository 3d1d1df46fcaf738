package drift

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
)

func init() { retryBase = time.Millisecond }

// TestStripeListPagesAndRetries: pages of 100 after the last id, created
// since the window's start, the caller's query kept; a 429 and a 503 are
// retried, a 404 is ErrGone and a 401 is not retried.
func TestStripeListPagesAndRetries(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		queries  []url.Values
		failures = []int{http.StatusTooManyRequests, http.StatusServiceUnavailable}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer sk_test_drift" {
			http.Error(w, `{"error":{"type":"invalid_request_error"}}`, http.StatusUnauthorized)
			return
		}
		if len(failures) > 0 {
			http.Error(w, `{}`, failures[0])
			failures = failures[1:]
			return
		}
		if r.URL.Path == "/v1/things/th_gone" {
			http.Error(w, `{"error":{"code":"resource_missing"}}`, http.StatusNotFound)
			return
		}
		q := r.URL.Query()
		queries = append(queries, q)
		start := 0
		if after := q.Get("starting_after"); after != "" {
			fmt.Sscanf(after, "th_%d", &start)
			start++
		}
		var data []map[string]any
		for i := start; i < min(start+100, 250); i++ {
			data = append(data, map[string]any{"id": fmt.Sprintf("th_%d", i)})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "has_more": start+100 < 250})
	}))
	defer srv.Close()
	api := provider.StripeAPI{Base: srv.URL, Key: "sk_test_drift", HTTP: srv.Client()}

	since := time.Unix(1_700_000_000, 0)
	seen := 0
	err := StripeList(context.Background(), api, "/v1/things", url.Values{"status": {"all"}}, since, func(at time.Time, data []json.RawMessage) error {
		seen += len(data)
		require.Zero(t, at.Nanosecond(), "the second it was asked")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 250, seen)
	require.Len(t, queries, 3)
	for _, q := range queries {
		require.Equal(t, "100", q.Get("limit"))
		require.Equal(t, "1700000000", q.Get("created[gte]"))
		require.Equal(t, "all", q.Get("status"))
	}
	require.Equal(t, "th_199", queries[2].Get("starting_after"))

	var v json.RawMessage
	_, err = StripeGet(context.Background(), api, "/v1/things/th_gone", &v)
	require.ErrorIs(t, err, ErrGone)

	failures = nil
	_, err = StripeGet(context.Background(), provider.StripeAPI{Base: srv.URL, Key: "sk_wrong", HTTP: srv.Client()}, "/v1/things/th_1", &v)
	var refused *provider.APIRefusal
	require.True(t, errors.As(err, &refused))
	require.Equal(t, http.StatusUnauthorized, refused.Code)
	require.NotErrorIs(t, err, ErrGone)
}

// TestStripeEventIsASnapshotEvent: a repair reads as the event Stripe
// would have sent, created when Stripe was asked, in the object's mode.
func TestStripeEventIsASnapshotEvent(t *testing.T) {
	t.Parallel()
	body, err := StripeEvent("drift_sub_1_1700000000", "customer.subscription.updated", time.Unix(1_700_000_000, 0),
		json.RawMessage(`{"id":"sub_1","object":"subscription","livemode":true,"status":"active"}`))
	require.NoError(t, err)
	parsed, err := provider.Stripe.Parse(http.Header{}, body, nil)
	require.NoError(t, err)
	require.Equal(t, "drift_sub_1_1700000000", parsed.ID)
	require.Equal(t, "customer.subscription.updated", parsed.Type)
	require.True(t, time.Unix(1_700_000_000, 0).Equal(parsed.OccurredAt))
	require.JSONEq(t, `{"id":"drift_sub_1_1700000000","object":"event","type":"customer.subscription.updated","created":1700000000,"livemode":true,
		"data":{"object":{"id":"sub_1","object":"subscription","livemode":true,"status":"active"}}}`, string(body))
}

// TestStripeGetTellsTimeByStripesClock: an answer is dated by its Date
// header, Stripe's clock, not this machine's; so is a 404's ErrGone.
func TestStripeGetTellsTimeByStripesClock(t *testing.T) {
	t.Parallel()
	stripeNow := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", stripeNow.Format(http.TimeFormat))
		if r.URL.Path == "/v1/things/th_gone" {
			http.Error(w, `{"error":{"code":"resource_missing"}}`, http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte(`{"id":"th_1"}`))
	}))
	t.Cleanup(srv.Close)
	api := provider.StripeAPI{Base: srv.URL, Key: "sk_test_drift"}
	var v json.RawMessage
	at, err := StripeGet(context.Background(), api, "/v1/things/th_1", &v)
	require.NoError(t, err)
	require.True(t, stripeNow.Equal(at), "%s", at)
	at, err = StripeGet(context.Background(), api, "/v1/things/th_gone", &v)
	require.ErrorIs(t, err, ErrGone)
	var gone *GoneError
	require.ErrorAs(t, err, &gone)
	require.True(t, stripeNow.Equal(gone.At))
	require.True(t, stripeNow.Equal(at))
}
