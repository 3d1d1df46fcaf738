package entitlement_test

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/features/entitlement"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// summary is a Stripe entitlements.active_entitlement_summary.updated
// event of customer at created, with an active entitlement per feature
// (lookup_key:feature id), expanded as Stripe sends it.
func summary(eventID, customer string, created int64, features ...string) ledgertest.Event {
	items := make([]string, len(features))
	for i, f := range features {
		key, id, _ := strings.Cut(f, ":")
		items[i] = fmt.Sprintf(`{"id":"ent_%s","object":"entitlements.active_entitlement","feature":{"id":%q,"object":"entitlements.feature",`+
			`"active":true,"livemode":false,"lookup_key":%q,"metadata":{},"name":%q},"livemode":false,"lookup_key":%q}`, id, id, key, key, key)
	}
	return ledgertest.Event{Provider: "stripe", ID: eventID, Type: entitlement.Type, Payload: []byte(fmt.Sprintf(
		`{"id":%q,"object":"event","type":%q,"created":%d,"data":{"object":{"object":"entitlements.active_entitlement_summary",`+
			`"customer":%q,"entitlements":{"object":"list","data":[%s],"has_more":false,"url":"/v1/customer/%s/entitlements"},"livemode":false}}}`,
		eventID, entitlement.Type, created, customer, strings.Join(items, ","), customer))}
}

// active lists a customer's rows as lookup_key:feature_id, by lookup key.
func active(t testing.TB, h *ledgertest.Harness, namespace, customer string) []string {
	t.Helper()
	rows, err := h.DB.SQL.Query(`SELECT lookup_key || ':' || feature_id FROM entitlement
		WHERE namespace = $1 AND provider = 'stripe' AND customer_id = $2 ORDER BY lookup_key`, namespace, customer)
	require.NoError(t, err)
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

func deliver(t *testing.T, h *ledgertest.Harness, events ...ledgertest.Event) {
	t.Helper()
	for _, e := range events {
		require.NoError(t, h.Deliver(t, e.Provider, e.ID, e.Type, e.Payload), e.ID)
	}
}

func setup(t *testing.T) *ledgertest.Harness {
	t.Helper()
	return ledgertest.New(t, 0, func(h *ledgertest.Harness) { entitlement.Register(h.Registry) })
}

// TestConformance: whatever the order, the batching, the duplicates, the
// forced re-applies or the concurrency, each customer ends with the set of
// its newest summary: the official example (the module's sample), a
// customer whose newest summary drops a feature, one whose newest set is
// empty, and two summaries of one second.
func TestConformance(t *testing.T) {
	t.Parallel()
	sample, err := fs.ReadFile(entitlement.Samples(), "stripe/"+entitlement.Type+".json")
	require.NoError(t, err)
	ledgertest.Conformance(t, ledgertest.Module{
		Register: func(h *ledgertest.Harness) { entitlement.Register(h.Registry) },
		Events: []ledgertest.Event{
			{Provider: "stripe", ID: "evt_1Corpus3e56348d664619", Type: entitlement.Type, Payload: sample},
			summary("evt_a1", "cus_A", 100, "basic:feat_b"),
			summary("evt_a2", "cus_A", 200, "basic:feat_b", "pro:feat_p", "sso:feat_s"),
			summary("evt_a3", "cus_A", 300, "basic:feat_b", "sso:feat_s"),
			summary("evt_b1", "cus_B", 100, "basic:feat_b"),
			summary("evt_b2", "cus_B", 200),
			summary("evt_c1", "cus_C", 100, "basic:feat_b"),
			summary("evt_c2", "cus_C", 100, "pro:feat_p"),
		},
		Check: func(t testing.TB, h *ledgertest.Harness) {
			require.Equal(t, []string{"api_access:feat_61Q4pNmoYkkTBJzG41QsF2f2Lp4QW7Kx", "premium_support:feat_61Q4pNmoYkkTBJzG41QsF2f2Lp4QW6Fw"},
				active(t, h, "stripe", "cus_QXg1o8vcGmoR32"), "the sample's two features")
			require.Equal(t, []string{"basic:feat_b", "sso:feat_s"}, active(t, h, "stripe", "cus_A"), "the newest set")
			require.Equal(t, []string{}, active(t, h, "stripe", "cus_B"), "the newest set is empty")
			require.Equal(t, []string{"pro:feat_p"}, active(t, h, "stripe", "cus_C"), "of one second, the greater set")
			require.Equal(t, 4, h.DB.Count(t, `SELECT count(*) FROM entitlement_summary`))
		},
		State: `SELECT e.namespace, e.provider, e.customer_id, e.lookup_key, e.feature_id, e.version, s.version, s.features, s.event_id
			FROM entitlement_summary s LEFT JOIN entitlement e USING (namespace, provider, customer_id)`,
	})
}

// TestNewestSetWinsDeliveredNewestMiddleOldest: three summaries delivered
// newest, middle, oldest leave the newest set; a newer one replaces it.
func TestNewestSetWinsDeliveredNewestMiddleOldest(t *testing.T) {
	t.Parallel()
	h := setup(t)
	deliver(t, h,
		summary("evt_new", "cus_1", 300, "pro:feat_p", "sso:feat_s"),
		summary("evt_mid", "cus_1", 200, "pro:feat_p", "basic:feat_b"),
		summary("evt_old", "cus_1", 100, "basic:feat_b"),
	)
	require.Equal(t, []string{"pro:feat_p", "sso:feat_s"}, active(t, h, "stripe", "cus_1"))
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM entitlement WHERE version = 300`), "the rows carry the summary's version")
	deliver(t, h, summary("evt_newer", "cus_1", 400, "basic:feat_b"))
	require.Equal(t, []string{"basic:feat_b"}, active(t, h, "stripe", "cus_1"))
}

// TestPoisonFailsForGood: a summary without a customer, or whose list is
// not a list, is no retry's to fix.
func TestPoisonFailsForGood(t *testing.T) {
	t.Parallel()
	h := setup(t)
	for i, body := range []string{
		`{"id":"evt_bad0","created":1,"data":{"object":{"entitlements":{"data":[]}}}}`,
		`{"id":"evt_bad1","created":1,"data":{"object":{"customer":"cus_1","entitlements":{"data":{"lookup_key":"x"}}}}}`,
		`{"id":"evt_bad2","created":1,"data":{"object":{"customer":"cus_1","entitlements":{"data":[{"feature":"feat_1"}]}}}}`,
	} {
		err := h.Deliver(t, "stripe", fmt.Sprintf("evt_bad%d", i), entitlement.Type, []byte(body))
		require.Error(t, err)
		require.True(t, ledger.IsPermanent(err), "%v", err)
	}
}

// TestNamespacesKeepTheirOwnEntitlements: a second source's summary of the
// same customer id (its own namespace) never changes the first's rows.
func TestNamespacesKeepTheirOwnEntitlements(t *testing.T) {
	t.Parallel()
	h := setup(t)
	deliver(t, h, summary("evt_ns1", "cus_1", 100, "pro:feat_p"))
	e := summary("evt_ns2", "cus_1", 200, "basic:feat_b")
	res, err := h.Claimer.Claim(context.Background(), ledger.Claim{
		Namespace: "stripe-eu", EventID: e.ID, Provider: "stripe", Source: "stripe-eu", Type: e.Type, Payload: e.Payload,
	})
	require.NoError(t, err)
	require.Equal(t, ledger.Claimed, res)
	require.NoError(t, h.Apply(t, "stripe-eu", e.ID, false))
	require.Equal(t, []string{"pro:feat_p"}, active(t, h, "stripe", "cus_1"))
	require.Equal(t, []string{"basic:feat_b"}, active(t, h, "stripe-eu", "cus_1"))
}

// TestEraseDeletesTheCustomersEntitlements: erase deletes the subject's
// rows and summary and leaves another customer's; a later summary of the
// erased customer, older or newer, writes nothing.
func TestEraseDeletesTheCustomersEntitlements(t *testing.T) {
	t.Parallel()
	h := setup(t)
	deliver(t, h, summary("evt_e1", "cus_A", 200, "pro:feat_p", "sso:feat_s"), summary("evt_e2", "cus_B", 200, "pro:feat_p"))
	holding := func() int {
		return h.DB.Count(t, `SELECT (SELECT count(*) FROM entitlement WHERE customer_id = 'cus_A')
			+ (SELECT count(*) FROM entitlement_summary WHERE customer_id = 'cus_A')`)
	}
	h.Erase(t, "cus_A", "entitlement", 3, holding)
	require.Equal(t, []string{"pro:feat_p"}, active(t, h, "stripe", "cus_B"))
	deliver(t, h, summary("evt_e_old", "cus_A", 100, "basic:feat_b"), summary("evt_e_new", "cus_A", 300, "basic:feat_b"))
	require.Zero(t, holding(), "no later summary writes the erased customer back")
}
