package usage_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEraseDeletesTheCustomersUsage: erase deletes the subject's deltas
// and totals together, so every total left is still the sum of its
// deltas; a redelivery of an erased event is a duplicate and adds nothing
// back; another customer's usage is untouched; a dry run counts the same
// rows and changes nothing.
func TestEraseDeletesTheCustomersUsage(t *testing.T) {
	t.Parallel()
	h := setup(t, 0)
	events := []struct {
		id   string
		body []byte
	}{
		{"msg_er_a1", recorded("cus_A", "api_calls", 5)},
		{"msg_er_a2", recorded("cus_A", "api_calls", 3)},
		{"msg_er_a3", recorded("cus_A", "storage", 2)},
		{"msg_er_b", recorded("cus_B", "api_calls", 7)},
	}
	for _, e := range events {
		require.NoError(t, h.Deliver(t, "standard", e.id, "usage.recorded", e.body))
	}
	holding := func(customer string) int {
		return h.DB.Count(t, `SELECT (SELECT count(*) FROM usage_total u WHERE strpos(row_to_json(u)::text, $1) > 0)
			+ (SELECT count(*) FROM usage_delta d WHERE strpos(row_to_json(d)::text, $1) > 0)`, customer)
	}
	require.Equal(t, 5, holding("cus_A"), "three deltas, two totals")

	h.Erase(t, "cus_A", "usage", 5, func() int { return holding("cus_A") })
	require.Equal(t, 7, total(t, h, "cus_B", "api_calls"))
	require.Equal(t, 2, holding("cus_B"))

	for _, e := range events[:3] {
		require.False(t, h.Claim(t, "standard", e.id, "usage.recorded", e.body), "a redelivery is a duplicate")
		require.NoError(t, h.Apply(t, "standard", e.id, false))
	}
	require.Zero(t, holding("cus_A"), "nothing adds the erased usage back")
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM usage_total u WHERE quantity <>
		(SELECT COALESCE(sum(quantity), 0) FROM usage_delta d WHERE d.namespace = u.namespace AND d.customer_id = u.customer_id AND d.metric = u.metric)`),
		"every total is the sum of its deltas")
}
