package subscription_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/features/subscription"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// sub is a subscription row as the tests expect it.
type sub struct {
	Customer, Plan, Status string
	Version                int64
}

// conformanceEvent is a Stripe subscription event with a fixed id.
func conformanceEvent(id, typ, subID, status string, created int64) ledgertest.Event {
	return ledgertest.Event{Provider: "stripe", ID: id, Type: typ, Payload: fmt.Appendf(nil,
		`{"id":%q,"object":"event","type":%q,"created":%d,"data":{"object":{"id":%q,"customer":"cus_conf","status":%q,"items":{"data":[{"price":{"id":"price_conf"}}]}}}}`,
		id, typ, created, subID, status)}
}

// TestConformance runs the ledger's suite on the Stripe and Paddle
// subscription events of the corpus (their official examples) and on
// events of one second whose precedence decides: every subscription ends
// at its newest state, whatever the order, the batching, the duplicates,
// the forced re-applies or the concurrency.
func TestConformance(t *testing.T) {
	t.Parallel()
	corpus := ledgertest.Corpus(t, func(p, typ string) bool {
		return p == "stripe" && strings.HasPrefix(typ, "customer.subscription.") || p == "paddle" && strings.HasPrefix(typ, "subscription.")
	})
	want := newestOf(t, corpus)
	events := ledgertest.Events(corpus)
	// Events of one second: the state further along the lifecycle wins,
	// then the later type; the stale update never wins.
	events = append(events,
		conformanceEvent("evt_conf_1", "customer.subscription.created", "sub_conf_a", "incomplete", 100),
		conformanceEvent("evt_conf_2", "customer.subscription.updated", "sub_conf_a", "active", 100),
		conformanceEvent("evt_conf_3", "customer.subscription.updated", "sub_conf_a", "past_due", 90),
		conformanceEvent("evt_conf_4", "customer.subscription.deleted", "sub_conf_b", "active", 200),
		conformanceEvent("evt_conf_5", "customer.subscription.updated", "sub_conf_b", "active", 200),
		conformanceEvent("evt_conf_6", "customer.subscription.created", "sub_conf_b", "trialing", 150),
		conformanceEvent("evt_conf_7", "customer.subscription.updated", "sub_conf_c", "active", 300),
	)
	want["stripe/sub_conf_a"] = sub{"cus_conf", "price_conf", "active", 100}
	want["stripe/sub_conf_b"] = sub{"cus_conf", "price_conf", "canceled", 200}
	want["stripe/sub_conf_c"] = sub{"cus_conf", "price_conf", "active", 300}

	ledgertest.Conformance(t, ledgertest.Module{
		Register: func(h *ledgertest.Harness) {
			subscription.Register(h.Registry, subscription.Config{Metrics: h.Metrics})
		},
		Events: events,
		Check: func(t testing.TB, h *ledgertest.Harness) {
			require.Equal(t, len(want), h.DB.Count(t, `SELECT count(*) FROM subscription`))
			for key, w := range want {
				prov, id, _ := strings.Cut(key, "/")
				var got sub
				require.NoError(t, h.DB.SQL.QueryRow(`SELECT customer_id, plan, status, version FROM subscription
					WHERE namespace = $1 AND provider = $1 AND external_id = $2`, prov, id).Scan(&got.Customer, &got.Plan, &got.Status, &got.Version), key)
				require.Equal(t, w, got, "%s: the newest event's state", key)
			}
		},
		State: `SELECT namespace, provider, external_id, customer_id, plan, status, version, rank, event_id FROM subscription`,
	})
}

// newestOf is the state of each subscription of the corpus events by its
// newest event, read as a client of the providers' APIs would read them.
func newestOf(t *testing.T, corpus []ledgertest.CorpusEvent) map[string]sub {
	t.Helper()
	want := map[string]sub{}
	for _, c := range corpus {
		var key string
		var s sub
		switch c.Provider {
		case "stripe":
			var ev struct {
				Created int64 `json:"created"`
				Data    struct {
					Object struct {
						ID       string          `json:"id"`
						Status   string          `json:"status"`
						Customer json.RawMessage `json:"customer"`
						Items    struct {
							Data []struct {
								Price struct {
									ID string `json:"id"`
								} `json:"price"`
							} `json:"data"`
						} `json:"items"`
					} `json:"object"`
				} `json:"data"`
			}
			require.NoError(t, json.Unmarshal(c.Payload, &ev), c.File)
			o := ev.Data.Object
			s = sub{Customer: provider.StripeID(o.Customer), Plan: o.Items.Data[0].Price.ID, Status: o.Status, Version: ev.Created}
			if c.Type == "customer.subscription.deleted" {
				s.Status = "canceled"
			}
			key = "stripe/" + o.ID
		case "paddle":
			var ev struct {
				OccurredAt time.Time `json:"occurred_at"`
				Data       struct {
					ID         string `json:"id"`
					Status     string `json:"status"`
					CustomerID string `json:"customer_id"`
					Items      []struct {
						Price struct {
							ID string `json:"id"`
						} `json:"price"`
					} `json:"items"`
				} `json:"data"`
			}
			require.NoError(t, json.Unmarshal(c.Payload, &ev), c.File)
			s = sub{Customer: ev.Data.CustomerID, Status: ev.Data.Status, Version: ev.OccurredAt.UnixMicro()}
			if len(ev.Data.Items) > 0 {
				s.Plan = ev.Data.Items[0].Price.ID
			}
			key = "paddle/" + ev.Data.ID
		}
		old, ok := want[key]
		require.False(t, ok && old.Version == s.Version, "%s: two corpus events of one version; the test expects none", key)
		if !ok || s.Version > old.Version {
			want[key] = s
		}
	}
	return want
}
