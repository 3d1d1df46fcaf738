package payment_test

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
	"github.com/hookledger/hookledger/modules/features/payment"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// driftStripe serves Stripe's payment intents (each with its charge,
// expanded when asked) and charges.
type driftStripe struct {
	mu      sync.Mutex
	intents map[string]map[string]any
	charges map[string]map[string]any
	// unexpanded counts list requests without expand[]=data.latest_charge.
	unexpanded int
}

func newDriftStripe(t *testing.T) (*driftStripe, provider.StripeAPI) {
	f := &driftStripe{intents: map[string]map[string]any{}, charges: map[string]map[string]any{}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	return f, provider.StripeAPI{Base: srv.URL, Key: "sk_test_drift", HTTP: srv.Client()}
}

// intent adds a payment intent and its charge (ch_ + the id after pi_).
func (f *driftStripe) intent(id, status string, amount, refunded int64) {
	ch := "ch_" + strings.TrimPrefix(id, "pi_")
	f.intents[id] = map[string]any{"id": id, "object": "payment_intent", "status": status, "amount": amount, "amount_received": amount,
		"currency": "eur", "customer": "cus_1", "latest_charge": ch, "livemode": false}
	f.charge(ch, id, amount, refunded)
}

func (f *driftStripe) charge(id, intent string, amount, refunded int64) {
	var pi any
	if intent != "" {
		pi = intent
	}
	f.charges[id] = map[string]any{"id": id, "object": "charge", "status": "succeeded", "amount": amount, "amount_refunded": refunded,
		"currency": "eur", "customer": "cus_1", "payment_intent": pi, "livemode": false}
}

// expanded is a payment intent with its latest charge as an object.
func (f *driftStripe) expanded(id string) map[string]any {
	pi := map[string]any{}
	for k, v := range f.intents[id] {
		pi[k] = v
	}
	pi["latest_charge"] = f.charges[pi["latest_charge"].(string)]
	return pi
}

func (f *driftStripe) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer sk_test_drift" {
		http.Error(w, `{"error":{"message":"Invalid API Key"}}`, http.StatusUnauthorized)
		return
	}
	q := r.URL.Query()
	gone := func() { http.Error(w, `{"error":{"code":"resource_missing"}}`, http.StatusNotFound) }
	switch {
	case r.URL.Path == "/v1/payment_intents":
		if !slices.Contains(q["expand[]"], "data.latest_charge") {
			f.unexpanded++
		}
		ids := make([]string, 0, len(f.intents))
		for id := range f.intents {
			ids = append(ids, id)
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
			data = append(data, f.expanded(id))
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "has_more": end < len(ids)})
	case strings.HasPrefix(r.URL.Path, "/v1/payment_intents/"):
		id := strings.TrimPrefix(r.URL.Path, "/v1/payment_intents/")
		if _, ok := f.intents[id]; !ok {
			gone()
			return
		}
		obj := f.intents[id]
		if slices.Contains(q["expand[]"], "latest_charge") {
			obj = f.expanded(id)
		}
		_ = json.NewEncoder(w).Encode(obj)
	case strings.HasPrefix(r.URL.Path, "/v1/charges/"):
		ch, ok := f.charges[strings.TrimPrefix(r.URL.Path, "/v1/charges/")]
		if !ok {
			gone()
			return
		}
		_ = json.NewEncoder(w).Encode(ch)
	default:
		http.NotFound(w, r)
	}
}

func driftEvent(typ string, object map[string]any, created int64) []byte {
	body, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("evt_%s_%d", object["id"], created), "object": "event", "type": typ,
		"created": created, "data": map[string]any{"object": object}})
	return body
}

func driftSettle(t *testing.T, h *ledgertest.Harness, body []byte) {
	t.Helper()
	var ev struct{ ID, Type string }
	require.NoError(t, json.Unmarshal(body, &ev))
	require.True(t, h.Claim(t, "stripe", ev.ID, ev.Type, body))
	h.WaitSettled(t, "stripe", ev.ID)
}

func driftRow(t *testing.T, h *ledgertest.Harness, id string) string {
	t.Helper()
	var (
		status, currency, customer string
		amount, refunded           int64
	)
	err := h.DB.SQL.QueryRow(`SELECT status, amount, amount_refunded, currency, customer_id FROM payment WHERE namespace = 'stripe' AND external_id = $1`, id).
		Scan(&status, &amount, &refunded, &currency, &customer)
	require.NoError(t, err, id)
	return fmt.Sprintf("%s %d/%d %s %s", status, refunded, amount, currency, customer)
}

// TestStripeDriftRepairsWhatTheMergeCan: a missed refund, a payment
// hookledger lacks and a charge without a payment intent are repaired
// through the module's merge (with one receipt for the new payment); a
// stored amount above Stripe's and a payment Stripe lacks are reported
// and left; a payment intent that did not succeed is no drift.
func TestStripeDriftRepairsWhatTheMergeCan(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	h := ledgertest.New(t, 2, func(h *ledgertest.Harness) {
		payment.Register(h.Registry, payment.Config{DB: h.DB.SQL, Sender: rec})
	})
	stripe, api := newDriftStripe(t)
	old := time.Now().Add(-time.Hour).Unix()
	pi := func(id string, amount int64) map[string]any {
		return map[string]any{"id": id, "object": "payment_intent", "amount": amount, "amount_received": amount, "currency": "eur", "customer": "cus_1"}
	}
	for _, p := range []map[string]any{pi("pi_sync", 2000), pi("pi_refund", 3000), pi("pi_gone", 700), pi("pi_over", 5000)} {
		driftSettle(t, h, driftEvent("payment_intent.succeeded", p, old))
	}
	driftSettle(t, h, driftEvent("charge.refunded", map[string]any{"id": "ch_legacy", "object": "charge", "amount": 1000, "amount_refunded": 500,
		"currency": "eur", "customer": "cus_1", "payment_intent": nil}, old))
	stripe.intent("pi_sync", "succeeded", 2000, 0)
	stripe.intent("pi_refund", "succeeded", 3000, 1000)
	stripe.intent("pi_over", "succeeded", 4000, 0)
	stripe.intent("pi_new", "succeeded", 1500, 0)
	stripe.intent("pi_open", "requires_payment_method", 900, 0)
	stripe.charge("ch_legacy", "", 1000, 1000)
	dbtest.Eventually(t, func() bool { return len(rec.sent()) == 5 })

	m := &payment.StripeDrift{DB: h.DB.SQL, API: api}
	check := func() map[string]string {
		t.Helper()
		r, err := drift.Check(context.Background(), drift.Options{Namespace: "stripe", Modules: []drift.Module{m}})
		require.NoError(t, err)
		out := map[string]string{}
		for _, f := range r.Findings {
			out[f.ID] = string(f.Drift) + ": " + drift.Describe(f.Fields)
		}
		return out
	}
	r, err := drift.Check(context.Background(), drift.Options{Namespace: "stripe", Modules: []drift.Module{m}})
	require.NoError(t, err)
	require.Zero(t, stripe.unexpanded, "every list reads the latest charges")
	require.Len(t, r.Findings, 5)
	want := map[string]string{
		"ch_legacy": "differs: status partially_refunded -> refunded, amount_refunded 500 -> 1000",
		"pi_gone":   "missing_at_provider: status succeeded -> -, amount 700 -> -, amount_refunded 0 -> -, currency eur -> -, customer_id cus_1 -> -",
		"pi_new":    "missing_here: status - -> succeeded, amount - -> 1500, amount_refunded - -> 0, currency - -> eur, customer_id - -> cus_1",
		"pi_over":   "differs: amount 5000 -> 4000",
		"pi_refund": "differs: status succeeded -> partially_refunded, amount_refunded 0 -> 1000",
	}
	require.Equal(t, want, check())

	src := &intake.Source{Name: "stripe", Namespace: "stripe", Provider: provider.Stripe}
	out, err := drift.Fix(context.Background(), r.Plan(drift.StripeEvent), drift.FixOptions{Source: src, Ledger: h.Claimer, Wait: dbtest.Patience})
	require.NoError(t, err)
	results := map[string]string{}
	for _, o := range out {
		results[o.ID] = string(o.Result) + " " + o.EventType
	}
	require.Equal(t, map[string]string{
		"ch_legacy": "repaired charge.refunded",
		"pi_gone":   "cannot_repair ",
		"pi_new":    "repaired payment_intent.succeeded",
		"pi_over":   "cannot_repair ",
		"pi_refund": "repaired charge.refunded",
	}, results)
	require.Equal(t, "partially_refunded 1000/3000 eur cus_1", driftRow(t, h, "pi_refund"))
	require.Equal(t, "succeeded 0/1500 eur cus_1", driftRow(t, h, "pi_new"))
	require.Equal(t, "refunded 1000/1000 eur cus_1", driftRow(t, h, "ch_legacy"))
	require.Equal(t, "succeeded 0/5000 eur cus_1", driftRow(t, h, "pi_over"), "never moved backwards")
	dbtest.Eventually(t, func() bool { return slices.Contains(rec.sent(), "pi_new") })
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'payment_receipt' AND args->>'payment_id' = 'pi_new'`))

	require.Equal(t, map[string]string{"pi_gone": want["pi_gone"], "pi_over": want["pi_over"]}, check(), "what the merge cannot repair stays reported")
}
