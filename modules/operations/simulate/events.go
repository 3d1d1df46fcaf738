package simulate

import (
	"encoding/json"
	"fmt"
	"time"
)

// event is one generated provider event.
type event struct {
	id, typ string
	body    []byte
	// what it implies
	customer     string
	quantity     int64
	subscription string
	status       string
	version      int64
}

var statuses = []string{"trialing", "active", "past_due", "active", "unpaid", "active", "canceled"}

// generators build event i of n for each provider.
var generators = map[string]func(prefix string, i, n int) *event{
	// Stripe: subscription updates, several per subscription, each a second
	// apart, so the newest is unambiguous whatever the arrival order.
	"stripe": func(prefix string, i, n int) *event {
		sub := fmt.Sprintf("sub_%s%d", prefix, i%max(n/5, 1))
		created := time.Now().Unix() - int64(n) + int64(i)
		st := statuses[i%len(statuses)]
		id := fmt.Sprintf("evt_%s%d", prefix, i)
		body := mustJSON(map[string]any{
			"id": id, "object": "event", "type": "customer.subscription.updated", "created": created,
			"data": map[string]any{"object": map[string]any{
				"id": sub, "object": "subscription", "customer": "cus_sim", "status": st,
				"items": map[string]any{"data": []any{map[string]any{"price": map[string]any{"id": "price_sim"}}}},
			}},
		})
		return &event{id: id, typ: "customer.subscription.updated", body: body, subscription: sub, status: st, version: created}
	},
	// Standard Webhooks: usage deltas, which only the ledger keeps from
	// being counted twice.
	"standard": func(prefix string, i, _ int) *event {
		customer := fmt.Sprintf("cus_%s%d", prefix, i%10)
		qty := int64(i%7 + 1)
		body := mustJSON(map[string]any{
			"type": "usage.recorded", "timestamp": time.Now().UTC().Format(time.RFC3339Nano),
			"data": map[string]any{"customer_id": customer, "metric": "api_calls", "quantity": qty},
		})
		return &event{id: fmt.Sprintf("msg_%s%d", prefix, i), typ: "usage.recorded", body: body, customer: customer, quantity: qty}
	},
	"paddle": func(prefix string, i, n int) *event {
		sub := fmt.Sprintf("sub_%s%d", prefix, i%max(n/5, 1))
		at := time.Now().Add(time.Duration(i-n) * time.Second).UTC()
		st := statuses[i%len(statuses)]
		id := fmt.Sprintf("evt_%s%d", prefix, i)
		body := mustJSON(map[string]any{
			"event_id": id, "event_type": "subscription.updated", "occurred_at": at.Format(time.RFC3339Nano),
			"data": map[string]any{"id": sub, "status": st, "customer_id": "ctm_sim", "items": []any{map[string]any{"price": map[string]any{"id": "pri_sim"}}}},
		})
		return &event{id: id, typ: "subscription.updated", body: body, subscription: sub, status: st, version: at.UnixMicro()}
	},
	"github": func(prefix string, i, _ int) *event {
		id := fmt.Sprintf("%s-%08d-0000-4000-8000-000000000000", prefix, i)
		body := mustJSON(map[string]any{
			"ref": "refs/heads/main", "before": fmt.Sprintf("%040d", i), "after": fmt.Sprintf("%040d", i+1),
			"repository": map[string]any{"full_name": "sim/" + prefix, "pushed_at": time.Now().Unix() + int64(i)},
		})
		return &event{id: id, typ: "push", body: body}
	},
	"shopify": func(prefix string, i, _ int) *event {
		id := fmt.Sprintf("%s-%d", prefix, i)
		return &event{id: id, typ: "products/update", body: mustJSON(map[string]any{"id": i, "updated_at": time.Now().UTC().Format(time.RFC3339)})}
	},
	"slack": func(prefix string, i, _ int) *event {
		id := fmt.Sprintf("Ev%s%d", prefix, i)
		return &event{id: id, typ: "app_mention", body: mustJSON(map[string]any{
			"type": "event_callback", "event_id": id, "event_time": time.Now().Unix(), "team_id": "T1",
			"event": map[string]any{"type": "app_mention", "text": "hi"},
		})}
	},
}

// expect folds events into the state they imply.
func expect(events []*event) Expectation {
	e := Expectation{Usage: map[string]int64{}, Subscriptions: map[string]SubscriptionState{}}
	for _, ev := range events {
		if ev.customer != "" {
			e.Usage[ev.customer] += ev.quantity
		}
		if ev.subscription != "" && ev.version > e.Subscriptions[ev.subscription].Version {
			e.Subscriptions[ev.subscription] = SubscriptionState{Status: ev.status, Version: ev.version}
		}
	}
	return e
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
