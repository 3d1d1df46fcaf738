package simulate

import (
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// payloads are copies of the real provider payloads in testdata/providers
// (a test keeps them identical), embedded so the binary can send them.
//
//go:embed payloads/*.json
var payloads embed.FS

// Template is one event type trigger and simulate send, built from a real
// payload of its provider. Which modules apply it is the handler
// registrations' to say, not the catalog's: trigger --list reads them.
type Template struct {
	Type     string `json:"type"`
	Provider string `json:"provider"`
	// File is the payload it starts from, under testdata/providers.
	File  string `json:"file"`
	build func(body map[string]any, ids ids, now time.Time)
}

// ids are the fresh identifiers of one built event.
type ids struct {
	event, object string
	suffix        string
}

// templates lists every type, in the order --list prints them.
var templates = []Template{
	{Type: "customer.subscription.created", Provider: "stripe", File: "stripe/customer.subscription.created.json", build: stripeObject("sub_")},
	{Type: "customer.subscription.updated", Provider: "stripe", File: "stripe/customer.subscription.updated.json", build: stripeObject("sub_")},
	{Type: "customer.subscription.deleted", Provider: "stripe", File: "stripe/customer.subscription.deleted.json", build: stripeObject("sub_")},
	{Type: "payment_intent.succeeded", Provider: "stripe", File: "stripe/payment_intent.succeeded.json", build: stripePaymentIntent},
	{Type: "charge.refunded", Provider: "stripe", File: "stripe/payment_intent.succeeded.json", build: stripeChargeRefunded},
	{Type: "invoice.paid", Provider: "stripe", File: "stripe/invoice.paid.json", build: stripeObject("in_")},
	{Type: "invoice.payment_failed", Provider: "stripe", File: "stripe/invoice.paid.json", build: stripeInvoiceFailed},
	{Type: "subscription.created", Provider: "paddle", File: "paddle/subscription.created.evt_01hv9771tccgcm4y810d8zbceh.json", build: paddleObject("sub_", "")},
	{Type: "subscription.updated", Provider: "paddle", File: "paddle/subscription.updated.evt_01hg0trpmmdkkdbk4p8czp4drm.json", build: paddleObject("sub_", "")},
	{Type: "subscription.canceled", Provider: "paddle", File: "paddle/subscription.updated.evt_01hg0trpmmdkkdbk4p8czp4drm.json", build: paddleObject("sub_", "canceled")},
	{Type: "transaction.completed", Provider: "paddle", File: "paddle/events-list-response.GET_events.json", build: paddleObject("txn_", "")},
	{Type: "push", Provider: "github", File: "github/push.default.json", build: githubPush},
	{Type: "usage.recorded", Provider: "standard", File: "standard-webhooks/contact.created.spec-example.json", build: standardUsage},
}

// payloadFile maps a template's testdata file to its embedded copy.
var payloadFile = map[string]string{
	"stripe/customer.subscription.created.json":                       "customer.subscription.created.json",
	"stripe/customer.subscription.updated.json":                       "customer.subscription.updated.json",
	"stripe/customer.subscription.deleted.json":                       "customer.subscription.deleted.json",
	"stripe/payment_intent.succeeded.json":                            "payment_intent.succeeded.json",
	"stripe/invoice.paid.json":                                        "invoice.paid.json",
	"paddle/subscription.created.evt_01hv9771tccgcm4y810d8zbceh.json": "paddle.subscription.created.json",
	"paddle/subscription.updated.evt_01hg0trpmmdkkdbk4p8czp4drm.json": "paddle.subscription.updated.json",
	"paddle/events-list-response.GET_events.json":                     "paddle.transaction.completed.json",
	"github/push.default.json":                                        "github.push.json",
	"standard-webhooks/contact.created.spec-example.json":             "standard.contact.created.json",
}

// Templates lists every event type trigger can send, by provider.
func Templates() []Template {
	out := append([]Template(nil), templates...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Provider < out[j].Provider })
	return out
}

// LookupTemplate finds the template of an event type.
func LookupTemplate(eventType string) (Template, bool) {
	for _, t := range templates {
		if t.Type == eventType {
			return t, true
		}
	}
	return Template{}, false
}

// Build returns a delivery of the template's type with fresh ids, dated
// now: the event id (and GitHub's delivery id) and the object's id are new;
// objectID, when set, keeps one object across several events (a
// subscription created, then updated).
func (t Template) Build(objectID string, now time.Time) (provider.Delivery, error) {
	raw, err := payloads.ReadFile("payloads/" + payloadFile[t.File])
	if err != nil {
		return provider.Delivery{}, fmt.Errorf("payload of %s: %w", t.Type, err)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		return provider.Delivery{}, fmt.Errorf("payload of %s: %w", t.Type, err)
	}
	suffix := freshSuffix()
	id := ids{suffix: suffix, object: objectID}
	switch t.Provider {
	case "github":
		id.event = fmt.Sprintf("%s-%s-4%s-8%s-%s", suffix[:8], suffix[8:12], suffix[12:15], suffix[15:18], suffix[18:30])
	case "standard":
		id.event = "msg_" + suffix
	default:
		id.event = "evt_" + suffix
	}
	t.build(body, id, now)
	switch t.Provider {
	case "stripe":
		body["type"] = t.Type
	case "paddle":
		body["event_type"] = t.Type
	}
	out, err := json.Marshal(body)
	if err != nil {
		return provider.Delivery{}, err
	}
	return provider.Delivery{ID: id.event, Type: t.Type, At: now, Body: out}, nil
}

func freshSuffix() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func object(body map[string]any) map[string]any {
	data, _ := body["data"].(map[string]any)
	if data == nil {
		data = map[string]any{}
		body["data"] = data
	}
	if o, ok := data["object"].(map[string]any); ok {
		return o
	}
	return data
}

func orFresh(id ids, prefix string) string {
	if id.object != "" {
		return id.object
	}
	return prefix + id.suffix[:24]
}

// stripeObject sets the envelope's id, type-preserving created time and
// the object's id.
func stripeObject(prefix string) func(map[string]any, ids, time.Time) {
	return func(body map[string]any, id ids, now time.Time) {
		body["id"], body["created"] = id.event, now.Unix()
		object(body)["id"] = orFresh(id, prefix)
	}
}

func stripePaymentIntent(body map[string]any, id ids, now time.Time) {
	stripeObject("pi_")(body, id, now)
	object(body)["latest_charge"] = "ch_" + id.suffix[:24]
}

// stripeChargeRefunded turns the payment intent into the refund of its
// charge: the charge carries the intent's amount, currency and customer.
func stripeChargeRefunded(body map[string]any, id ids, now time.Time) {
	pi := object(body)
	intent := "pi_" + id.suffix[:24]
	charge := map[string]any{
		"id": orFresh(id, "ch_"), "object": "charge", "amount": pi["amount"], "amount_captured": pi["amount_received"],
		"amount_refunded": pi["amount_received"], "captured": true, "currency": pi["currency"], "customer": pi["customer"],
		"created": now.Unix(), "livemode": false, "paid": true, "payment_intent": intent, "refunded": true, "status": "succeeded",
		"metadata": map[string]any{},
	}
	body["id"], body["created"] = id.event, now.Unix()
	body["data"] = map[string]any{"object": charge}
}

// stripeInvoiceFailed turns the paid invoice into one whose payment
// attempt failed.
func stripeInvoiceFailed(body map[string]any, id ids, now time.Time) {
	stripeObject("in_")(body, id, now)
	inv := object(body)
	inv["status"], inv["attempted"], inv["attempt_count"], inv["amount_paid"] = "open", true, 1, 0
	inv["amount_remaining"] = inv["amount_due"]
}

func paddleObject(prefix, status string) func(map[string]any, ids, time.Time) {
	return func(body map[string]any, id ids, now time.Time) {
		body["event_id"], body["occurred_at"] = id.event, now.UTC().Format(time.RFC3339Nano)
		data := object(body)
		data["id"] = orFresh(id, prefix)
		if status != "" {
			data["status"], data["canceled_at"] = status, now.UTC().Format(time.RFC3339Nano)
		}
	}
}

func githubPush(body map[string]any, id ids, now time.Time) {
	body["before"], body["after"] = body["after"], fmt.Sprintf("%040s", id.suffix)
	if repo, ok := body["repository"].(map[string]any); ok {
		repo["pushed_at"] = now.Unix()
	}
}

// standardUsage puts a usage.recorded record in the Standard Webhooks
// envelope of the specification's example.
func standardUsage(body map[string]any, id ids, now time.Time) {
	customer := id.object
	if customer == "" {
		customer = "cus_trigger"
	}
	body["type"], body["timestamp"] = "usage.recorded", now.UTC().Format(time.RFC3339Nano)
	body["data"] = map[string]any{"customer_id": customer, "metric": "api_calls", "quantity": 1}
}

// TypesOf lists the event types of a provider's templates.
func TypesOf(providerName string) []string {
	var out []string
	for _, t := range templates {
		if t.Provider == providerName {
			out = append(out, t.Type)
		}
	}
	return out
}
