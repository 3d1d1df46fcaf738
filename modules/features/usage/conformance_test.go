package usage_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/features/usage"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// TestConformance runs the ledger's suite on the usage events of the
// corpus and on more of several customers and metrics, enveloped and
// verbatim: each event adds its quantity exactly once, whatever the order,
// the batching, the duplicates, the forced re-applies or the concurrency.
func TestConformance(t *testing.T) {
	t.Parallel()
	events := ledgertest.Events(ledgertest.Corpus(t, func(p, typ string) bool { return p == "standard" && typ == "usage.recorded" }))
	for i, r := range []struct {
		customer, metric string
		qty              int
	}{
		{"cus_conf_a", "api_calls", 5}, {"cus_conf_b", "api_calls", 7}, {"cus_conf_a", "api_calls", 11},
		{"cus_conf_a", "seats", 2}, {"cus_conf_b", "api_calls", 13}, {"cus_conf_c", "seats", 1},
	} {
		events = append(events, ledgertest.Event{Provider: "standard", ID: fmt.Sprintf("msg_conf_%d", i), Type: "usage.recorded",
			Payload: recorded(r.customer, r.metric, r.qty)})
	}
	// A sender that publishes its data verbatim feeds the same totals.
	for i, r := range []struct {
		customer, metric string
		qty              int
	}{{"cus_conf_a", "api_calls", 17}, {"cus_conf_d", "seats", 3}} {
		events = append(events, ledgertest.Event{Provider: "standard", ID: fmt.Sprintf("msg_conf_verbatim_%d", i), Type: "usage.recorded",
			Payload: []byte(fmt.Sprintf(`{"customer_id":%q,"metric":%q,"quantity":%d}`, r.customer, r.metric, r.qty))})
	}
	type data struct {
		CustomerID string `json:"customer_id"`
		Metric     string `json:"metric"`
		Quantity   int    `json:"quantity"`
	}
	want := map[string]int{}
	for _, ev := range events {
		var body struct {
			data
			Data *data `json:"data"`
		}
		require.NoError(t, json.Unmarshal(ev.Payload, &body), ev.ID)
		d := body.data
		if body.Data != nil {
			d = *body.Data
		}
		want[d.CustomerID+"/"+d.Metric] += d.Quantity
	}
	require.Equal(t, 33, want["cus_conf_a/api_calls"])

	ledgertest.Conformance(t, ledgertest.Module{
		Register: func(h *ledgertest.Harness) { usage.Register(h.Registry) },
		Events:   events,
		Check: func(t testing.TB, h *ledgertest.Harness) {
			require.Equal(t, len(want), h.DB.Count(t, `SELECT count(*) FROM usage_total`))
			for key, qty := range want {
				customer, metric, _ := strings.Cut(key, "/")
				require.Equal(t, qty, h.DB.Count(t, `SELECT quantity FROM usage_total WHERE namespace = 'standard' AND customer_id = $1 AND metric = $2`,
					customer, metric), "%s: each usage event counted once", key)
			}
			require.Equal(t, len(events), h.DB.Count(t, `SELECT count(*) FROM usage_delta`), "one delta per event")
		},
		State: `SELECT namespace, customer_id, metric, quantity FROM usage_total`,
	})
}
