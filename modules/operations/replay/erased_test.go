package replay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// TestReplaySkipsEventsOfAnErasedSubject: events an outage missed, one of
// them of a customer erased since; replay claims the others and counts
// that one as erased, so no ledger row holds the customer again; a second
// run counts it the same.
func TestReplaySkipsEventsOfAnErasedSubject(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	base := time.Now().Add(-time.Hour).Unix()
	fake, srv := newFakeStripe(t, 3, func(i int) int64 { return base + int64(i) })
	fake.events[1]["data"] = map[string]any{"object": map[string]any{"id": "in_1", "customer": "cus_Zapped"}}
	_, err := h.Claimer.Erase(context.Background(), "cus_Zapped", "stripe", false)
	require.NoError(t, err)

	sink := &Direct{Source: stripeSource(), Claimer: h.Claimer}
	o := StripeOptions{APIBase: srv.URL, APIKey: "sk_test_key", Since: time.Unix(base, 0), HTTP: srv.Client()}
	stats, err := Stripe(context.Background(), o, sink, nil)
	require.NoError(t, err)
	require.Equal(t, Stats{Fetched: 3, New: 2, Erased: 1}, stats)
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event e WHERE strpos(e::text, 'cus_Zapped') > 0`))
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM webhook_event`))

	again, err := Stripe(context.Background(), o, sink, nil)
	require.NoError(t, err)
	require.Equal(t, Stats{Fetched: 3, Duplicate: 2, Erased: 1}, again)
}
