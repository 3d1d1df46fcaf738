package subscription_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/drift"
	"github.com/hookledger/hookledger/modules/core/intake"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/features/subscription"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// driftStripe serves Stripe's subscription endpoints over a fixed set: the
// list (canceled ones only with status=all, as Stripe) and retrieve (404
// for an unknown id).
type driftStripe struct {
	mu   sync.Mutex
	subs map[string]map[string]any
	// withoutAll counts list requests without status=all; fetched lists
	// the subscriptions read by id.
	withoutAll int
	fetched    []string
}

func newDriftStripe(t *testing.T) (*driftStripe, provider.StripeAPI) {
	f := &driftStripe{subs: map[string]map[string]any{}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	return f, provider.StripeAPI{Base: srv.URL, Key: "sk_test_drift", HTTP: srv.Client()}
}

func (f *driftStripe) add(id, status, plan string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs[id] = map[string]any{"id": id, "object": "subscription", "customer": "cus_" + id, "status": status, "livemode": false,
		"created": time.Now().Add(-24 * time.Hour).Unix(),
		"items":   map[string]any{"object": "list", "data": []any{map[string]any{"id": "si_" + id, "price": map[string]any{"id": plan}}}}}
}

func (f *driftStripe) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer sk_test_drift" {
		http.Error(w, `{"error":{"message":"Invalid API Key"}}`, http.StatusUnauthorized)
		return
	}
	if id, ok := strings.CutPrefix(r.URL.Path, "/v1/subscriptions/"); ok {
		f.fetched = append(f.fetched, id)
		if s, ok := f.subs[id]; ok {
			_ = json.NewEncoder(w).Encode(s)
			return
		}
		http.Error(w, `{"error":{"code":"resource_missing","message":"No such subscription"}}`, http.StatusNotFound)
		return
	}
	if r.URL.Path != "/v1/subscriptions" {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	if q.Get("status") != "all" {
		f.withoutAll++
	}
	gte, _ := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
	ids := make([]string, 0, len(f.subs))
	for id, s := range f.subs {
		if (s["status"] != "canceled" || q.Get("status") == "all") && s["created"].(int64) >= gte {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	start := 0
	if after := q.Get("starting_after"); after != "" {
		start = slices.Index(ids, after) + 1
	}
	limit, _ := strconv.Atoi(q.Get("limit"))
	end := min(start+limit, len(ids))
	data := []any{}
	for _, id := range ids[start:end] {
		data = append(data, f.subs[id])
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "has_more": end < len(ids)})
}

// driftSettle claims a subscription event and waits for the workers.
func driftSettle(t *testing.T, h *ledgertest.Harness, body []byte) {
	t.Helper()
	var ev struct{ ID, Type string }
	require.NoError(t, json.Unmarshal(body, &ev))
	require.True(t, h.Claim(t, "stripe", ev.ID, ev.Type, body))
	h.WaitSettled(t, "stripe", ev.ID)
}

func driftEvent(typ, sub, status, plan string, created int64) []byte {
	return []byte(fmt.Sprintf(`{"id":"evt_%s_%d_%s","object":"event","type":%q,"created":%d,"data":{"object":{"id":%q,"customer":"cus_%s","status":%q,"items":{"data":[{"price":{"id":%q}}]}}}}`,
		sub, created, status, typ, created, sub, sub, status, plan))
}

// TestStripeDriftFindsAndRepairs: Stripe and the subscription table agree
// on one subscription, differ on the plan of another, Stripe lacks a
// third and has a fourth hookledger lacks; a subscription ended on one
// side and absent on the other is no drift. The repairs go through the
// module's handler; a row an event moved past Stripe's answer before the
// repair applied stays where that event put it; a second check finds
// nothing.
func TestStripeDriftFindsAndRepairs(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 2, func(h *ledgertest.Harness) {
		subscription.Register(h.Registry, subscription.Config{Metrics: h.Metrics})
	})
	stripe, api := newDriftStripe(t)
	old := time.Now().Add(-time.Hour).Unix()
	for _, s := range []struct{ id, status, plan string }{
		{"sub_sync", "active", "price_basic"}, {"sub_plan", "active", "price_basic"}, {"sub_gone", "active", "price_basic"},
		{"sub_raced", "active", "price_basic"}, {"sub_ended", "canceled", "price_basic"},
	} {
		driftSettle(t, h, driftEvent("customer.subscription.updated", s.id, s.status, s.plan, old))
	}
	stripe.add("sub_sync", "active", "price_basic")
	stripe.add("sub_plan", "active", "price_pro")
	stripe.add("sub_raced", "canceled", "price_basic")
	stripe.add("sub_new", "trialing", "price_pro")
	stripe.add("sub_old", "canceled", "price_basic")

	m := &subscription.StripeDrift{DB: h.DB.SQL, API: api}
	check := func() *drift.Report {
		t.Helper()
		r, err := drift.Check(context.Background(), drift.Options{Namespace: "stripe", Modules: []drift.Module{m}})
		require.NoError(t, err)
		return r
	}
	r := check()
	got := map[string]string{}
	for _, f := range r.Findings {
		got[f.ID] = string(f.Drift) + ": " + drift.Describe(f.Fields)
	}
	require.Equal(t, map[string]string{
		"sub_gone":  "missing_at_provider: status active -> -, plan price_basic -> -, customer_id cus_sub_gone -> -",
		"sub_new":   "missing_here: status - -> trialing, plan - -> price_pro, customer_id - -> cus_sub_new",
		"sub_plan":  "differs: plan price_basic -> price_pro",
		"sub_raced": "differs: status active -> canceled",
	}, got)
	require.Zero(t, stripe.withoutAll, "every list asks for every status")
	require.ElementsMatch(t, []string{"sub_gone", "sub_ended"}, stripe.fetched, "only the rows the list did not return are read by id")
	require.Equal(t, drift.Counts{Objects: 5, Rows: 5, Matched: 3, Gone: 2, Drifted: 4}, *r.Checked["subscription"])

	plan := r.Plan(drift.StripeEvent)
	// Stripe's subscription moves on a second after Stripe answered, and
	// its event reaches hookledger before the repair is applied.
	var answered time.Time
	for _, f := range r.Findings {
		if f.ID == "sub_raced" {
			answered = f.ObjectAt
		}
	}
	stripe.add("sub_raced", "past_due", "price_basic")
	driftSettle(t, h, driftEvent("customer.subscription.updated", "sub_raced", "past_due", "price_basic", answered.Unix()+1))

	src := &intake.Source{Name: "stripe", Namespace: "stripe", Provider: provider.Stripe}
	out, err := drift.Fix(context.Background(), plan, drift.FixOptions{Source: src, Ledger: h.Claimer, Wait: dbtest.Patience})
	require.NoError(t, err)
	results := map[string]string{}
	for _, o := range out {
		results[o.ID] = string(o.Result) + " " + o.EventType
	}
	require.Equal(t, map[string]string{
		"sub_gone":  "repaired customer.subscription.deleted",
		"sub_new":   "repaired customer.subscription.updated",
		"sub_plan":  "repaired customer.subscription.updated",
		"sub_raced": "superseded customer.subscription.deleted",
	}, results)

	for id, want := range map[string][3]string{
		"sub_sync":  {"active", "price_basic", "cus_sub_sync"},
		"sub_plan":  {"active", "price_pro", "cus_sub_plan"},
		"sub_gone":  {"canceled", "price_basic", "cus_sub_gone"},
		"sub_new":   {"trialing", "price_pro", "cus_sub_new"},
		"sub_raced": {"past_due", "price_basic", "cus_sub_raced"},
	} {
		s := (&fixture{Harness: h}).sub(t, id)
		require.Equal(t, want, [3]string{s.Status, s.Plan, s.CustomerID}, id)
	}
	require.Equal(t, 4, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'drift\_%' AND replayed AND status = 'settled'`))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM subscription WHERE external_id = 'sub_new' AND event_id LIKE 'drift\_sub\_new\_%'`),
		"the row names the repair that wrote it")

	require.Empty(t, check().Findings)
}

// TestStripeDriftSinceFetchesRowsByID: with --since, Stripe lists only
// newer subscriptions; rows written since then whose subscription is not
// listed are fetched by id and compared all the same.
func TestStripeDriftSinceFetchesRowsByID(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 2, func(h *ledgertest.Harness) {
		subscription.Register(h.Registry, subscription.Config{Metrics: h.Metrics})
	})
	stripe, api := newDriftStripe(t)
	driftSettle(t, h, driftEvent("customer.subscription.updated", "sub_a", "active", "price_basic", time.Now().Add(-time.Hour).Unix()))
	stripe.add("sub_a", "past_due", "price_basic")
	// A Stripe that honours created[gte] lists nothing created this late.
	r, err := drift.Check(context.Background(), drift.Options{Namespace: "stripe", Since: time.Now().Add(-time.Minute),
		Modules: []drift.Module{&subscription.StripeDrift{DB: h.DB.SQL, API: api}}})
	require.NoError(t, err)
	require.Len(t, r.Findings, 1)
	require.Equal(t, "sub_a", r.Findings[0].ID)
	require.Equal(t, drift.Differs, r.Findings[0].Drift)
	require.Equal(t, []string{"sub_a"}, stripe.fetched)
}
