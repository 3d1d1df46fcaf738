package app_test

import (
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

	"github.com/hookledger/hookledger/modules/testsupport/stripemock"
)

// driftAPI serves Stripe's subscriptions, payment intents (each with its
// latest charge expanded), invoices and customers over fixed objects, 404
// for unknown ids.
type driftAPI struct {
	mu      sync.Mutex
	objects map[string]map[string]map[string]any // collection -> id -> object
	// clock, when set, is Stripe's clock: the answers' Date header.
	clock func() time.Time
}

func newDriftAPI(t *testing.T) (*driftAPI, string) {
	f := &driftAPI{objects: map[string]map[string]map[string]any{"subscriptions": {}, "payment_intents": {}, "invoices": {}, "customers": {}}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *driftAPI) subscription(id, status, plan string) {
	f.objects["subscriptions"][id] = map[string]any{"id": id, "object": "subscription", "customer": "cus_drift", "status": status,
		"items": map[string]any{"object": "list", "data": []any{map[string]any{"price": map[string]any{"id": plan}}}}}
}

func (f *driftAPI) paymentIntent(id string, amount, refunded int64) {
	f.objects["payment_intents"][id] = map[string]any{"id": id, "object": "payment_intent", "status": "succeeded", "amount": amount,
		"amount_received": amount, "currency": "usd", "customer": "cus_drift",
		"latest_charge": map[string]any{"id": "ch_" + id, "object": "charge", "status": "succeeded", "amount": amount,
			"amount_refunded": refunded, "currency": "usd", "customer": "cus_drift", "payment_intent": id}}
}

func (f *driftAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.clock != nil {
		w.Header().Set("Date", f.clock().UTC().Format(http.TimeFormat))
	}
	if r.Header.Get("Authorization") != "Bearer sk_test_drift" {
		http.Error(w, `{"error":{"message":"Invalid API Key"}}`, http.StatusUnauthorized)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/v1/"), "/")
	objs, ok := f.objects[parts[0]]
	switch {
	case !ok || len(parts) > 2:
		http.NotFound(w, r)
	case len(parts) == 2:
		if o, ok := objs[parts[1]]; ok {
			_ = json.NewEncoder(w).Encode(o)
			return
		}
		http.Error(w, `{"error":{"code":"resource_missing"}}`, http.StatusNotFound)
	default:
		ids := make([]string, 0, len(objs))
		for id := range objs {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		start := 0
		if after := r.URL.Query().Get("starting_after"); after != "" {
			start = slices.Index(ids, after) + 1
		}
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		end := min(start+limit, len(ids))
		data := []any{}
		for _, id := range ids[start:end] {
			data = append(data, objs[id])
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "has_more": end < len(ids)})
	}
}

// deliverSettled posts a signed Stripe event and waits until it settled.
func (s *server) deliverSettled(t *testing.T, id, typ string, created int64, object map[string]any) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"id": id, "object": "event", "type": typ, "created": created, "data": map[string]any{"object": object}})
	require.NoError(t, err)
	code, _ := s.post(t, "/webhooks/stripe", body, signed(body, time.Now()))
	require.Equal(t, http.StatusOK, code)
	s.waitSettled(t, id)
}

func driftSub(id, status, plan string) map[string]any {
	return map[string]any{"id": id, "object": "subscription", "customer": "cus_drift", "status": status,
		"items": map[string]any{"data": []any{map[string]any{"price": map[string]any{"id": plan}}}}}
}

// driftIDs runs drift stripe --json and returns the exit code and the
// drifted ids.
func driftIDs(t *testing.T) (int, []string) {
	t.Helper()
	code, stdout, stderr := run("drift", "stripe", "--json")
	var doc struct {
		Namespace string `json:"namespace"`
		Drifted   []struct {
			ID    string `json:"id"`
			Kind  string `json:"kind"`
			Drift string `json:"drift"`
		} `json:"drifted"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &doc), "stdout is one JSON document: %s\nstderr: %s", stdout, stderr)
	require.Equal(t, "stripe", doc.Namespace)
	ids := []string{}
	for _, d := range doc.Drifted {
		ids = append(ids, d.ID)
	}
	return code, ids
}

// TestDriftCommandReportsAndRepairs: rows in sync, a row whose plan
// differs, a row Stripe lacks, a subscription hookledger lacks and a
// payment whose refund it missed: exit 3 naming each drifted id; --fix
// needs --yes without a terminal; --fix --yes repairs through the
// workers and a second run exits 0. (A row dated ahead of Stripe's answer
// is TestDriftReportsRowsAheadOfStripe's.)
func TestDriftCommandReportsAndRepairs(t *testing.T) {
	s := start(t, nil)
	api, base := newDriftAPI(t)
	t.Setenv("STRIPE_API_BASE", base)
	t.Setenv("STRIPE_API_KEY", "sk_test_drift")
	t.Setenv("DATABASE_URL", s.db.URL)

	old := time.Now().Add(-time.Hour).Unix()
	s.deliverSettled(t, "evt_drift_1", "customer.subscription.updated", old, driftSub("sub_sync", "active", "price_basic"))
	s.deliverSettled(t, "evt_drift_2", "customer.subscription.updated", old, driftSub("sub_plan", "active", "price_basic"))
	s.deliverSettled(t, "evt_drift_3", "customer.subscription.updated", old, driftSub("sub_gone", "active", "price_basic"))
	for _, p := range []string{"pi_sync", "pi_refund"} {
		s.deliverSettled(t, "evt_drift_"+p, "payment_intent.succeeded", old, map[string]any{"id": p, "object": "payment_intent",
			"amount": 2500, "amount_received": 2500, "currency": "usd", "customer": "cus_drift"})
	}
	api.subscription("sub_sync", "active", "price_basic")
	api.subscription("sub_plan", "active", "price_pro")
	api.subscription("sub_new", "active", "price_pro")
	api.paymentIntent("pi_sync", 2500, 0)
	api.paymentIntent("pi_refund", 2500, 500)

	code, ids := driftIDs(t)
	require.Equal(t, 3, code)
	require.ElementsMatch(t, []string{"sub_plan", "sub_gone", "sub_new", "pi_refund"}, ids)

	code, stdout, stderr := run("drift", "stripe")
	require.Equal(t, 3, code, stderr)
	require.Contains(t, stdout, "plan price_basic -> price_pro")
	require.Contains(t, stdout, "missing at stripe")
	require.Contains(t, stdout, fmt.Sprintf("%d (%s)", old, time.Unix(old, 0).UTC().Format(time.RFC3339)), "the row's version")

	code, _, stderr = run("drift", "stripe", "--fix")
	require.Equal(t, 2, code, "without a terminal --fix needs --yes")
	require.Contains(t, stderr, "--yes")
	require.Equal(t, 2, badCount(run("drift", "stripe", "--fix", "--dry-run")))
	require.Equal(t, 2, badCount(run("drift", "stripe", "--yes")))
	code, stdout, _ = run("drift", "stripe", "--dry-run")
	require.Equal(t, 3, code)
	require.Contains(t, stdout, "would repair subscription/sub_plan with customer.subscription.updated drift_sub_plan_")
	require.Contains(t, stdout, "would repair payment/pi_refund with charge.refunded drift_pi_refund_")
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'drift\_%'`), "nothing claimed yet")

	code, stdout, stderr = run("drift", "stripe", "--fix", "--yes")
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", stdout, stderr)
	for _, id := range []string{"subscription/sub_plan", "subscription/sub_gone", "subscription/sub_new", "payment/pi_refund"} {
		require.Contains(t, stdout, "repaired "+id)
	}
	require.Equal(t, 4, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'drift\_%' AND namespace = 'stripe'
		AND source = 'stripe' AND replayed AND status = 'settled'`))

	code, ids = driftIDs(t)
	require.Equal(t, 0, code)
	require.Empty(t, ids)
	code, stdout, _ = run("drift", "stripe")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "no drift in namespace stripe")

	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE external_id = 'sub_gone' AND status = 'canceled'`))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM payment WHERE external_id = 'pi_refund' AND amount_refunded = 500 AND status = 'partially_refunded'`))
}

// TestDriftCommandWithoutDrift: nothing stored and nothing at Stripe is
// no drift (exit 0); no key is an error (exit 1).
func TestDriftCommandWithoutDrift(t *testing.T) {
	s := start(t, nil)
	_, base := newDriftAPI(t)
	t.Setenv("STRIPE_API_BASE", base)
	t.Setenv("STRIPE_API_KEY", "sk_test_drift")
	t.Setenv("DATABASE_URL", s.db.URL)
	code, stdout, stderr := run("drift", "stripe", "--since", "24h")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "no drift")
	code, ids := driftIDs(t)
	require.Equal(t, 0, code)
	require.Empty(t, ids)

	t.Setenv("STRIPE_API_KEY", "")
	code, _, stderr = run("drift", "stripe")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "STRIPE_API_KEY")
	require.Equal(t, 2, badCount(run("drift", "stripe", "--since", "soon")))
	require.Equal(t, 2, badCount(run("drift", "paddle")))
}

// TestDriftAgainstStripeMock runs drift against Stripe's official mock
// server, which refuses any parameter the real API would refuse. `go tool
// task test` installs it and sets STRIPE_MOCK.
func TestDriftAgainstStripeMock(t *testing.T) {
	base := stripemock.Start(t)
	s := start(t, nil)
	t.Setenv("STRIPE_API_BASE", base)
	t.Setenv("STRIPE_API_KEY", stripemock.Key)
	t.Setenv("DATABASE_URL", s.db.URL)
	// The mock lists one active subscription, one draft invoice and one
	// customer with one active feature, which hookledger lacks, and one
	// payment intent that has not succeeded.
	code, ids := driftIDs(t)
	require.Equal(t, 3, code)
	require.Len(t, ids, 3)
	slices.Sort(ids)
	for i, prefix := range []string{"cus_", "in_", "sub_"} {
		require.True(t, strings.HasPrefix(ids[i], prefix), ids[i])
	}

	code, stdout, stderr := run("drift", "stripe", "--since", "720h", "--fix", "--yes")
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", stdout, stderr)
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE external_id = $1 AND status = 'active'`, ids[2]))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM invoice WHERE external_id = $1 AND status = 'draft'`, ids[1]))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM entitlement WHERE customer_id = $1`, ids[0]))
	code, ids = driftIDs(t)
	require.Equal(t, 0, code)
	require.Empty(t, ids)
}

// driftDocument is drift stripe --json's document, the parts these tests
// read.
type driftDocument struct {
	Checked map[string]struct {
		Drifted int `json:"drifted"`
		Erased  int `json:"erased"`
	} `json:"checked"`
	Drifted []driftEntry `json:"drifted"`
	Erased  []driftEntry `json:"erased"`
	Repairs []struct {
		ID      string `json:"id"`
		EventID string `json:"event_id"`
		Result  string `json:"result"`
		Reason  string `json:"reason"`
	} `json:"repairs"`
}

type driftEntry struct {
	ID       string `json:"id"`
	Drift    string `json:"drift"`
	Replayed bool   `json:"replayed"`
}

// driftJSON runs drift stripe --json with args and returns its exit code,
// its document and its whole stdout.
func driftJSON(t *testing.T, args ...string) (int, driftDocument, string) {
	t.Helper()
	code, stdout, stderr := run(append([]string{"drift", "stripe", "--json"}, args...)...)
	var doc driftDocument
	require.NoError(t, json.Unmarshal([]byte(stdout), &doc), "stdout: %s\nstderr: %s", stdout, stderr)
	return code, doc, stdout
}

func entryIDs(es []driftEntry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

// TestDriftAfterEraseWritesNothingBack: after erase --subject, the
// erased subscription (its customer redacted here, still the customer at
// Stripe) and a subscription of the customer hookledger never stored are
// reported apart as erased, not as drift (exit 0), without the subject;
// --fix claims nothing for them, and no row or payload holds the subject
// again.
func TestDriftAfterEraseWritesNothingBack(t *testing.T) {
	s := start(t, nil)
	api, base := newDriftAPI(t)
	t.Setenv("STRIPE_API_BASE", base)
	t.Setenv("STRIPE_API_KEY", "sk_test_drift")
	t.Setenv("DATABASE_URL", s.db.URL)

	old := time.Now().Add(-time.Hour).Unix()
	erased := driftSub("sub_erased", "active", "price_basic")
	erased["customer"] = "cus_erased"
	s.deliverSettled(t, "evt_erased", "customer.subscription.updated", old, erased)
	s.deliverSettled(t, "evt_kept", "customer.subscription.updated", old, driftSub("sub_kept", "active", "price_basic"))
	api.subscription("sub_erased", "active", "price_pro")
	api.subscription("sub_erased_new", "active", "price_pro")
	api.subscription("sub_kept", "active", "price_basic")
	api.objects["subscriptions"]["sub_erased"]["customer"] = "cus_erased"
	api.objects["subscriptions"]["sub_erased_new"]["customer"] = "cus_erased"

	code, _, stderr := run("erase", "--subject", "cus_erased", "--yes")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE external_id = 'sub_erased' AND customer_id = '(erased)'`))

	code, doc, stdout := driftJSON(t)
	require.Equal(t, 0, code, stdout)
	require.Empty(t, doc.Drifted)
	require.ElementsMatch(t, []string{"sub_erased", "sub_erased_new"}, entryIDs(doc.Erased))
	require.Equal(t, 2, doc.Checked["subscription"].Erased)
	require.NotContains(t, stdout, "cus_erased", "the report does not show the subject")

	code, stdout, stderr = run("drift", "stripe", "--fix", "--yes")
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", stdout, stderr)
	require.NotContains(t, stdout, "cus_erased")
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'drift\_%'`), "no repair claimed")
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM subscription s WHERE strpos(s::text, 'cus_erased') > 0`))
	require.Zero(t, s.db.Count(t, `SELECT count(*) FROM webhook_event e WHERE strpos(e::text, 'cus_erased') > 0`))
}

// TestDriftReportsRowsAheadOfStripe: a replayed event dated a day ahead
// wrote a row; a genuine event of now is stale against it. The row is
// drift of its own kind, ahead, marked replayed (before, it was never
// compared at all); --fix cannot repair it and never moves it back.
func TestDriftReportsRowsAheadOfStripe(t *testing.T) {
	s := start(t, map[string]string{"REPLAY_TOKEN": "replay-drift"})
	api, base := newDriftAPI(t)
	t.Setenv("STRIPE_API_BASE", base)
	t.Setenv("STRIPE_API_KEY", "sk_test_drift")
	t.Setenv("DATABASE_URL", s.db.URL)

	ahead := time.Now().Add(24 * time.Hour).Unix()
	body, err := json.Marshal(map[string]any{"id": "evt_ahead", "object": "event", "type": "customer.subscription.updated",
		"created": ahead, "data": map[string]any{"object": driftSub("sub_ahead", "active", "price_basic")}})
	require.NoError(t, err)
	code, _ := s.post(t, "/webhooks/stripe", body, http.Header{"X-Replay-Token": {"replay-drift"}})
	require.Equal(t, http.StatusOK, code)
	s.waitSettled(t, "evt_ahead")
	s.deliverSettled(t, "evt_genuine", "customer.subscription.updated", time.Now().Unix(), driftSub("sub_ahead", "canceled", "price_basic"))
	api.subscription("sub_ahead", "canceled", "price_basic")

	code, doc, stdout := driftJSON(t)
	require.Equal(t, 3, code, stdout)
	require.Equal(t, []driftEntry{{ID: "sub_ahead", Drift: "ahead", Replayed: true}}, doc.Drifted)

	code, doc, stdout = driftJSON(t, "--fix", "--yes")
	require.Equal(t, 3, code, stdout)
	require.Len(t, doc.Repairs, 1)
	require.Equal(t, "cannot_repair", doc.Repairs[0].Result)
	require.Contains(t, doc.Repairs[0].Reason, "ahead")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE external_id = 'sub_ahead' AND version = $1 AND status = 'active'`, ahead))
}

// TestDriftRepairTakesStripesClock: Stripe's clock is behind this
// machine's. A repair is dated by Stripe's clock (its answer's Date), so
// a real change Stripe makes just after the check, whose event Stripe
// dates by its own clock, is applied over the repair, not refused as
// stale.
func TestDriftRepairTakesStripesClock(t *testing.T) {
	s := start(t, nil)
	api, base := newDriftAPI(t)
	stripeNow := time.Now().Add(-time.Hour).Truncate(time.Second)
	api.clock = func() time.Time { return stripeNow }
	t.Setenv("STRIPE_API_BASE", base)
	t.Setenv("STRIPE_API_KEY", "sk_test_drift")
	t.Setenv("DATABASE_URL", s.db.URL)

	s.deliverSettled(t, "evt_clock", "customer.subscription.updated", stripeNow.Add(-time.Hour).Unix(), driftSub("sub_clock", "active", "price_basic"))
	api.subscription("sub_clock", "active", "price_pro")

	code, doc, stdout := driftJSON(t, "--fix", "--yes")
	require.Equal(t, 0, code, stdout)
	require.Len(t, doc.Repairs, 1)
	require.Equal(t, "repaired", doc.Repairs[0].Result)
	require.Equal(t, fmt.Sprintf("drift_sub_clock_%d", stripeNow.Unix()), doc.Repairs[0].EventID, "named by Stripe's clock")
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE external_id = 'sub_clock' AND version = $1`, stripeNow.Unix()))

	// The customer cancels a second after Stripe answered.
	s.deliverSettled(t, "evt_real_change", "customer.subscription.updated", stripeNow.Add(time.Second).Unix(), driftSub("sub_clock", "canceled", "price_pro"))
	require.Equal(t, 1, s.db.Count(t, `SELECT count(*) FROM subscription WHERE external_id = 'sub_clock' AND status = 'canceled'`),
		"the real change is newer than the repair")
}
