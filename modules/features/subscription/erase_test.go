package subscription_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/features/subscription"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// customerEvent is a Stripe subscription event of customer.
func customerEvent(id, sub, customer, status string, created int64) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"object":"event","type":"customer.subscription.updated","created":%d,"data":{"object":{"id":%q,"customer":%q,"status":%q,"items":{"data":[{"price":{"id":"price_basic"}}]}}}}`,
		id, created, sub, customer, status))
}

// TestEraseRedactsTheCustomerAndKeepsTheVersion: erase redacts the
// customer of each of the subject's subscriptions and keeps the row's
// state and version, so neither a redelivery of an erased event nor an
// older event arriving late writes the customer back; another
// customer's rows are untouched, and a dry run counts the same rows and
// changes nothing.
func TestEraseRedactsTheCustomerAndKeepsTheVersion(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	bodies := map[string][]byte{
		"evt_er_a1": customerEvent("evt_er_a1", "sub_er_a1", "cus_A", "active", 200),
		"evt_er_a2": customerEvent("evt_er_a2", "sub_er_a2", "cus_A", "trialing", 200),
		"evt_er_b":  customerEvent("evt_er_b", "sub_er_b", "cus_B", "active", 200),
	}
	for _, b := range bodies {
		require.NoError(t, f.deliver(t, b))
	}
	holding := func(customer string) int {
		return f.DB.Count(t, `SELECT count(*) FROM subscription s WHERE strpos(row_to_json(s)::text, $1) > 0`, customer)
	}
	require.Equal(t, 2, holding("cus_A"))

	f.Erase(t, "cus_A", "subscription", 2, func() int { return holding("cus_A") })
	a1 := f.sub(t, "sub_er_a1")
	require.Equal(t, ledger.Erased, a1.CustomerID)
	require.Equal(t, "active", a1.Status)
	require.Equal(t, int64(200), a1.Version, "the version stays, to keep older events out")
	b := f.sub(t, "sub_er_b")
	require.Equal(t, "cus_B", b.CustomerID)
	require.Equal(t, "active", b.Status)

	require.False(t, f.Claim(t, "stripe", "evt_er_a1", "customer.subscription.updated", bodies["evt_er_a1"]), "a redelivery is a duplicate")
	require.NoError(t, f.Apply(t, "stripe", "evt_er_a1", false))
	require.NoError(t, f.deliver(t, customerEvent("evt_er_a1_late", "sub_er_a1", "cus_A", "past_due", 150)), "an older event, delivered late")
	require.Zero(t, holding("cus_A"), "nothing writes the customer back")
	require.Equal(t, "active", f.sub(t, "sub_er_a1").Status)

	again, err := f.Claimer.EraseModules(ctx, f.Registry, "cus_A", "", false)
	require.NoError(t, err)
	require.Equal(t, []ledger.ModuleErasure{{Module: "subscription", Rows: 0}}, again)
}

// TestErasedCustomerIsNotWrittenBack: a tie's re-fetch job reads Stripe
// while the customer is erased; Stripe's answer still names the customer.
// The job writes Stripe's status and keeps the customer redacted; so does
// a newer event of the customer's subscription, and a subscription of the
// customer new to hookledger.
func TestErasedCustomerIsNotWrittenBack(t *testing.T) {
	t.Parallel()
	asked, answer := make(chan struct{}, 1), make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		<-answer
		_, _ = w.Write([]byte(`{"id":"sub_er_tie","object":"subscription","customer":"cus_R","status":"unpaid","items":{"data":[{"price":{"id":"price_pro"}}]}}`))
	}))
	defer api.Close()
	defer close(answer)
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		subscription.Register(h.Registry, subscription.Config{DB: h.DB.SQL, Metrics: h.Metrics, StripeAPI: provider.StripeAPI{Base: api.URL, Key: "sk_test_tie", HTTP: api.Client()}})
	})
	f := &fixture{Harness: h, metrics: h.Metrics}
	ctx := context.Background()
	require.NoError(t, f.deliver(t, customerEvent("evt_er_t1", "sub_er_tie", "cus_R", "active", 900)))
	require.NoError(t, f.deliver(t, customerEvent("evt_er_t2", "sub_er_tie", "cus_R", "past_due", 900)))
	<-asked // the re-fetch job is waiting for Stripe's answer

	_, err := f.Claimer.Erase(ctx, "cus_R", "", false)
	require.NoError(t, err)
	_, err = f.Claimer.EraseModules(ctx, f.Registry, "cus_R", "", false)
	require.NoError(t, err)
	require.Equal(t, ledger.Erased, f.sub(t, "sub_er_tie").CustomerID)
	answer <- struct{}{}

	refetched := f.metrics.VersionTies.WithLabelValues("subscription", "refetched")
	dbtest.Eventually(t, func() bool { return testutil.ToFloat64(refetched) == 1 })
	s := f.sub(t, "sub_er_tie")
	require.Equal(t, "unpaid", s.Status, "Stripe's state is written")
	require.Equal(t, ledger.Erased, s.CustomerID, "its customer is not")

	require.NoError(t, f.deliver(t, customerEvent("evt_er_t3", "sub_er_tie", "cus_R", "active", 901)))
	require.NoError(t, f.deliver(t, customerEvent("evt_er_new", "sub_er_new", "cus_R", "active", 901)))
	require.Equal(t, "active", f.sub(t, "sub_er_tie").Status)
	require.Zero(t, f.DB.Count(t, `SELECT count(*) FROM subscription s WHERE strpos(row_to_json(s)::text, 'cus_R') > 0`))
	require.Equal(t, ledger.Erased, f.sub(t, "sub_er_new").CustomerID)
}
