package entitlement_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/drift"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/features/entitlement"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/drifttest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
	"github.com/hookledger/hookledger/modules/testsupport/stripemock"
)

// driftStripe serves Stripe's customers (list and retrieve, a deleted one
// as Stripe answers it) and each customer's active entitlements, in the
// shapes of Stripe's API.
type driftStripe struct {
	mu        sync.Mutex
	customers map[string]map[string]any
	// active is each customer's active entitlements, by lookup_key.
	active map[string]map[string]map[string]any
	// asked counts requests per path.
	asked map[string]int
}

func newDriftStripe(t *testing.T) (*driftStripe, provider.StripeAPI) {
	f := &driftStripe{customers: map[string]map[string]any{}, active: map[string]map[string]map[string]any{}, asked: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	return f, provider.StripeAPI{Base: srv.URL, Key: "sk_test_drift", HTTP: srv.Client()}
}

// customer sets a customer's active features, lookup keys whose feature
// id is feat_ + the key.
func (f *driftStripe) customer(id string, keys ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.customers[id] = map[string]any{"id": id, "object": "customer", "livemode": false, "created": time.Now().Add(-24 * time.Hour).Unix()}
	f.active[id] = map[string]map[string]any{}
	for _, k := range keys {
		f.active[id]["ent_"+id+"_"+k] = map[string]any{"id": "ent_" + id + "_" + k, "object": "entitlements.active_entitlement",
			"feature": "feat_" + k, "livemode": false, "lookup_key": k}
	}
}

// deleteCustomer deletes a customer as Stripe does: retrieve answers
// deleted, the list leaves it out.
func (f *driftStripe) deleteCustomer(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.customers, id)
	delete(f.active, id)
	f.customers["deleted:"+id] = map[string]any{"id": id, "object": "customer", "deleted": true}
}

func (f *driftStripe) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer sk_test_drift" {
		http.Error(w, `{"error":{"message":"Invalid API Key"}}`, http.StatusUnauthorized)
		return
	}
	f.asked[r.URL.Path]++
	q := r.URL.Query()
	switch id, byID := strings.CutPrefix(r.URL.Path, "/v1/customers/"); {
	case byID:
		c, ok := f.customers[id]
		if !ok {
			c, ok = f.customers["deleted:"+id]
		}
		if !ok {
			stripemock.Missing(w)
			return
		}
		_ = json.NewEncoder(w).Encode(c)
	case r.URL.Path == "/v1/customers":
		live := map[string]map[string]any{}
		for id, c := range f.customers {
			if c["deleted"] == nil {
				live[id] = c
			}
		}
		stripemock.List(w, q, live)
	case r.URL.Path == "/v1/entitlements/active_entitlements":
		active, ok := f.active[q.Get("customer")]
		if !ok {
			http.Error(w, `{"error":{"code":"resource_missing","param":"customer","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		stripemock.List(w, q, active)
	default:
		http.NotFound(w, r)
	}
}

// summaries numbers the summary events the tests deliver, whose ids do
// not name their customer (an erased one is in no ledger row).
var summaries atomic.Int64

// driftSettle delivers the module's official sample summary for customer,
// listing keys (feature feat_ + the key), created then, and waits for the
// workers to apply it.
func driftSettle(t *testing.T, h *ledgertest.Harness, customer string, created int64, keys ...string) {
	t.Helper()
	body, err := fs.ReadFile(entitlement.Samples(), "stripe/"+entitlement.Type+".json")
	require.NoError(t, err)
	var ev map[string]any
	require.NoError(t, json.Unmarshal(body, &ev))
	list := []any{}
	for _, k := range keys {
		list = append(list, map[string]any{"id": "ent_" + customer + "_" + k, "object": "entitlements.active_entitlement", "livemode": false,
			"lookup_key": k, "feature": map[string]any{"id": "feat_" + k, "object": "entitlements.feature", "lookup_key": k, "active": true}})
	}
	obj := ev["data"].(map[string]any)["object"].(map[string]any)
	obj["customer"] = customer
	obj["entitlements"].(map[string]any)["data"] = list
	id := fmt.Sprintf("evt_summary_%d_%d", created, summaries.Add(1))
	ev["id"], ev["created"] = id, created
	body, err = json.Marshal(ev)
	require.NoError(t, err)
	require.True(t, h.Claim(t, "stripe", id, entitlement.Type, body))
	h.WaitSettled(t, "stripe", id)
}

// stored is a customer's rows: the summary's version, then its
// entitlement rows' lookup_key=feature_id, each at its version.
func stored(t *testing.T, h *ledgertest.Harness, customer string) string {
	t.Helper()
	rows := dbtest.Strings(t, h.DB.SQL, `SELECT v FROM (
			SELECT '' AS k, '@' || version AS v FROM entitlement_summary WHERE namespace = 'stripe' AND customer_id = $1
			UNION ALL
			SELECT lookup_key, lookup_key || '=' || feature_id || '@' || version FROM entitlement WHERE namespace = 'stripe' AND customer_id = $1
		) r ORDER BY k COLLATE "C"`, customer)
	return strings.Join(rows, " ")
}

func newDriftHarness(t *testing.T) *ledgertest.Harness {
	return ledgertest.New(t, 2, func(h *ledgertest.Harness) { entitlement.Register(h.Registry) })
}

// TestStripeDriftReplacesMissedSummaries: hookledger missed the summary
// that gave one customer a feature, the one that took another's last
// feature away, every summary of a third, and a customer's deletion;
// another is in sync, and a customer without features on either side is
// no drift. Each repair is Stripe's summary, applied by the module's
// handler, replacing the customer's set; a summary of a later moment
// applied before the repair keeps its set, and an older summary delivered
// after the repair changes nothing.
func TestStripeDriftReplacesMissedSummaries(t *testing.T) {
	t.Parallel()
	h := newDriftHarness(t)
	stripe, api := newDriftStripe(t)
	old := time.Now().Add(-time.Hour).Unix()
	driftSettle(t, h, "cus_sync", old, "api_access", "premium")
	driftSettle(t, h, "cus_missed", old, "api_access")
	driftSettle(t, h, "cus_dropped", old, "premium")
	driftSettle(t, h, "cus_deleted", old, "premium")
	driftSettle(t, h, "cus_raced", old, "api_access")
	stripe.customer("cus_sync", "premium", "api_access")
	stripe.customer("cus_missed", "api_access", "premium")
	stripe.customer("cus_dropped")
	stripe.customer("cus_new", "api_access")
	stripe.customer("cus_none")
	stripe.customer("cus_raced", "premium")
	stripe.customer("cus_deleted", "premium")
	stripe.deleteCustomer("cus_deleted")

	m := &entitlement.StripeDrift{DB: h.DB.SQL, API: api}
	r, got := drifttest.Check(t, h, m)
	require.Equal(t, map[string]string{
		"cus_deleted": "missing_at_provider: features premium=feat_premium -> -",
		"cus_dropped": "differs: features premium=feat_premium -> -",
		"cus_missed":  "differs: features api_access=feat_api_access -> api_access=feat_api_access,premium=feat_premium",
		"cus_new":     "missing_here: features - -> api_access=feat_api_access",
		"cus_raced":   "differs: features api_access=feat_api_access -> premium=feat_premium",
	}, got)
	require.Equal(t, drift.Counts{Objects: 6, Rows: 5, Matched: 4, Gone: 1, Drifted: 5}, *r.Checked["entitlement"])
	require.Equal(t, 6, stripe.asked["/v1/entitlements/active_entitlements"], "one request per customer listed; none for a deleted one")
	require.Equal(t, 1, stripe.asked["/v1/customers/cus_deleted"], "only the row the list did not return is read by id")

	plan := r.Plan(drift.StripeEvent)
	// The customer gains a feature a second after Stripe answered, and its
	// summary reaches hookledger before the repair is applied.
	answered := drifttest.ObjectAt(t, r, "cus_raced")
	stripe.customer("cus_raced", "premium", "sso")
	driftSettle(t, h, "cus_raced", answered.Unix()+1, "premium", "sso")

	require.Equal(t, map[string]string{
		"cus_deleted": "repaired " + entitlement.Type,
		"cus_dropped": "repaired " + entitlement.Type,
		"cus_missed":  "repaired " + entitlement.Type,
		"cus_new":     "repaired " + entitlement.Type,
		"cus_raced":   "superseded " + entitlement.Type,
	}, drifttest.Fix(t, h, plan))
	at, later := answered.Unix(), answered.Unix()+1
	require.Equal(t, fmt.Sprintf("@%d api_access=feat_api_access@%d premium=feat_premium@%d", at, at, at), stored(t, h, "cus_missed"))
	require.Equal(t, fmt.Sprintf("@%d api_access=feat_api_access@%d", at, at), stored(t, h, "cus_new"))
	require.Equal(t, fmt.Sprintf("@%d", at), stored(t, h, "cus_dropped"), "an empty set keeps its version")
	require.Equal(t, fmt.Sprintf("@%d premium=feat_premium@%d sso=feat_sso@%d", later, later, later), stored(t, h, "cus_raced"),
		"the later summary's set is kept")
	require.Equal(t, fmt.Sprintf("@%d api_access=feat_api_access@%d premium=feat_premium@%d", old, old, old), stored(t, h, "cus_sync"))
	require.Regexp(t, `^@\d+$`, stored(t, h, "cus_deleted"), "a deleted customer has no features")
	require.Empty(t, stored(t, h, "cus_none"))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM entitlement_summary WHERE customer_id = 'cus_new' AND event_id LIKE 'drift\_cus\_new\_%'`),
		"the summary names the repair that wrote it")

	// A summary older than the repair, delivered late, changes nothing.
	driftSettle(t, h, "cus_missed", old+1, "api_access")
	require.Equal(t, fmt.Sprintf("@%d api_access=feat_api_access@%d premium=feat_premium@%d", at, at, at), stored(t, h, "cus_missed"))

	_, got = drifttest.Check(t, h, m)
	require.Empty(t, got)
}

// TestStripeDriftReportsASummaryAheadOfStripe: a summary dated a day
// ahead wrote a customer's set; it is reported ahead, cannot be repaired,
// and its set is kept.
func TestStripeDriftReportsASummaryAheadOfStripe(t *testing.T) {
	t.Parallel()
	h := newDriftHarness(t)
	stripe, api := newDriftStripe(t)
	ahead := time.Now().Add(24 * time.Hour).Unix()
	driftSettle(t, h, "cus_ahead", ahead, "premium")
	stripe.customer("cus_ahead", "api_access")

	r, err := drift.Check(context.Background(), drift.Options{Namespace: "stripe", Modules: []drift.Module{&entitlement.StripeDrift{DB: h.DB.SQL, API: api}}})
	require.NoError(t, err)
	require.Len(t, r.Findings, 1)
	require.Equal(t, drift.Ahead, r.Findings[0].Drift)
	require.Equal(t, map[string]string{"cus_ahead": "cannot_repair "}, drifttest.Fix(t, h, r.Plan(drift.StripeEvent)))
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'drift\_%'`), "nothing claimed")
	require.Equal(t, fmt.Sprintf("@%d premium=feat_premium@%d", ahead, ahead), stored(t, h, "cus_ahead"))
}

// TestStripeDriftAfterEraseWritesNoEntitlementBack: after the customer is
// erased (its summary and features deleted), Stripe's features of it are
// reported apart as erased, not drift; the repair planned before the
// erase is not claimed, and no row or ledger event holds the customer
// again.
func TestStripeDriftAfterEraseWritesNoEntitlementBack(t *testing.T) {
	t.Parallel()
	h := newDriftHarness(t)
	stripe, api := newDriftStripe(t)
	driftSettle(t, h, "cus_erased", time.Now().Add(-time.Hour).Unix(), "premium")
	stripe.customer("cus_erased", "premium", "api_access")

	m := &entitlement.StripeDrift{DB: h.DB.SQL, API: api}
	before, got := drifttest.Check(t, h, m)
	require.Len(t, got, 1, "before the erase it is drift")

	drifttest.Erase(t, h, "cus_erased")
	require.Empty(t, stored(t, h, "cus_erased"))

	r, got := drifttest.Check(t, h, m)
	require.Empty(t, got)
	require.Len(t, r.Erased, 1)
	require.Equal(t, 1, r.Checked["entitlement"].Erased)

	require.Equal(t, map[string]string{"cus_erased": "erased " + entitlement.Type}, drifttest.Fix(t, h, before.Plan(drift.StripeEvent)),
		"the repair planned before the erase is not claimed")
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'drift\_%'`))
	require.Empty(t, stored(t, h, "cus_erased"))
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event e WHERE strpos(e::text, 'cus_erased') > 0`))
}

// TestStripeDriftAgainstStripeMock runs the check and its repairs against
// Stripe's official mock, which refuses any parameter the real API would
// refuse: it lists one customer, which hookledger has no summary of, and
// answers every customer's active entitlements with one feature, which a
// stored customer's set lacks.
func TestStripeDriftAgainstStripeMock(t *testing.T) {
	base := stripemock.Start(t)
	h := newDriftHarness(t)
	driftSettle(t, h, "cus_stale", time.Now().Add(-time.Hour).Unix(), "premium")

	m := &entitlement.StripeDrift{DB: h.DB.SQL, API: provider.StripeAPI{Base: base, Key: stripemock.Key}}
	r, got := drifttest.Check(t, h, m)
	require.Len(t, got, 2, "%v", got)
	var listed string
	for id, d := range got {
		if id == "cus_stale" {
			require.True(t, strings.HasPrefix(d, "differs: features premium=feat_premium -> something=feat_"), d)
			continue
		}
		listed = id
		require.True(t, strings.HasPrefix(d, "missing_here: features - -> something=feat_"), d)
	}

	require.Equal(t, map[string]string{"cus_stale": "repaired " + entitlement.Type, listed: "repaired " + entitlement.Type},
		drifttest.Fix(t, h, r.Plan(drift.StripeEvent)))
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM entitlement WHERE lookup_key = 'something' AND feature_id LIKE 'feat\_%'`))
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM entitlement WHERE lookup_key = 'premium'`))
	_, got = drifttest.Check(t, h, m)
	require.Empty(t, got)
}

// TestStripeDriftReadsEveryPage: Stripe pages customers and a customer's
// entitlements 100 at a time; the check reads every page of both, and the
// repair writes the whole set.
func TestStripeDriftReadsEveryPage(t *testing.T) {
	t.Parallel()
	h := newDriftHarness(t)
	stripe, api := newDriftStripe(t)
	keys := make([]string, 101)
	for i := range keys {
		keys[i] = fmt.Sprintf("feature_%03d", i)
		stripe.customer(fmt.Sprintf("cus_empty_%03d", i))
	}
	stripe.customer("cus_many", keys...)

	r, got := drifttest.Check(t, h, &entitlement.StripeDrift{DB: h.DB.SQL, API: api})
	require.Len(t, got, 1)
	require.Equal(t, 102, r.Checked["entitlement"].Objects, "every customer, over two pages")
	require.Equal(t, 103, stripe.asked["/v1/entitlements/active_entitlements"], "two pages for cus_many")
	require.Equal(t, map[string]string{"cus_many": "repaired " + entitlement.Type}, drifttest.Fix(t, h, r.Plan(drift.StripeEvent)))
	require.Equal(t, 101, h.DB.Count(t, `SELECT count(*) FROM entitlement WHERE customer_id = 'cus_many'`))
	_, got = drifttest.Check(t, h, &entitlement.StripeDrift{DB: h.DB.SQL, API: api})
	require.Empty(t, got)
}
