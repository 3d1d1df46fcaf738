package subscription

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	entsub "github.com/hookledger/hookledger/ent/subscription"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// Config holds the module's dependencies.
type Config struct {
	// DB is where the re-fetch job writes what Stripe answered.
	DB      *sql.DB
	Metrics *metrics.Set
	// StripeAPI, when it has a key, resolves equal-version ties by
	// re-fetching the subscription from Stripe, in a job of its own.
	StripeAPI provider.StripeAPI
}

// Register adds the module's event handlers and its re-fetch worker.
func Register(reg *ledger.Registry, cfg Config) {
	m := &module{cfg: cfg}
	for _, t := range stripeTypes {
		reg.Handle("stripe", t, m.applyStripe)
	}
	for _, t := range paddleTypes {
		reg.Handle("paddle", t, m.applyPaddle)
	}
	ledger.AddWorker(reg, &refetchWorker{cfg: cfg})
}

// The event types applied, each carrying the whole subscription. They are
// listed rather than matched as a family so that metrics name each type,
// and so that a type Stripe or Paddle adds later shows up as unhandled (it
// is counted and logged) instead of being applied unseen.
var (
	stripeTypes = []string{
		"customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted",
		"customer.subscription.paused", "customer.subscription.resumed", "customer.subscription.trial_will_end",
		"customer.subscription.pending_update_applied", "customer.subscription.pending_update_expired",
	}
	paddleTypes = []string{
		"subscription.created", "subscription.updated", "subscription.activated", "subscription.canceled",
		"subscription.paused", "subscription.resumed", "subscription.past_due", "subscription.trialing", "subscription.imported",
	}
)

type module struct {
	cfg Config
}

// state is one version of a subscription, ready to be written.
type state struct {
	Namespace  string
	Provider   string
	ExternalID string
	CustomerID string
	Plan       string
	Status     string
	Version    int64
	Rank       int
	EventID    string
	// refetchTie asks for a re-fetch job when this state ties the stored one.
	refetchTie bool
}

// stripeEvent is the part of a Stripe customer.subscription.* event used.
type stripeEvent struct {
	Created int64 `json:"created"`
	Data    struct {
		Object stripeSubscription `json:"object"`
	} `json:"data"`
}

// stripeSubscription is the part of a Stripe subscription used, in an
// event's data.object or as the API answers it.
type stripeSubscription struct {
	ID       string          `json:"id"`
	Customer json.RawMessage `json:"customer"`
	Status   string          `json:"status"`
	Items    struct {
		Data []stripeItem `json:"data"`
	} `json:"items"`
}

// stripeItem is the part of a subscription item used.
type stripeItem struct {
	Price struct {
		ID string `json:"id"`
	} `json:"price"`
	Plan struct {
		ID string `json:"id"`
	} `json:"plan"`
}

// plan is the first item's price id (its legacy plan id on old API
// versions), or "" without items.
func (o *stripeSubscription) plan() string {
	if len(o.Items.Data) == 0 {
		return ""
	}
	if id := o.Items.Data[0].Price.ID; id != "" {
		return id
	}
	return o.Items.Data[0].Plan.ID
}

// decodeStripeEvent reads the fields used in one pass over the payload,
// skipping the rest of a large event (a subscription's items, plans and
// metadata) without decoding it: decoding the payload was most of an
// apply's CPU, and reading each nested level again, or the items with
// encoding/json, still half of it.
func decodeStripeEvent(payload []byte) (stripeEvent, error) {
	var (
		se    stripeEvent
		first stripeItem
	)
	o := &se.Data.Object
	item := []provider.Field{
		{Name: "price", Fields: []provider.Field{{Name: "id", Dst: &first.Price.ID}}},
		{Name: "plan", Fields: []provider.Field{{Name: "id", Dst: &first.Plan.ID}}},
	}
	object := []provider.Field{
		{Name: "id", Dst: &o.ID}, {Name: "customer", Dst: &o.Customer}, {Name: "status", Dst: &o.Status},
		{Name: "items", Fields: []provider.Field{{Name: "data", Fields: item, List: true}}},
	}
	err := provider.DecodeFields(payload, provider.Field{Name: "created", Dst: &se.Created},
		provider.Field{Name: "data", Fields: []provider.Field{{Name: "object", Fields: object}}})
	if first != (stripeItem{}) {
		// Only the first item is read (plan), so it stands for the list.
		o.Items.Data = []stripeItem{first}
	}
	return se, err
}

func (m *module) applyStripe(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	se, err := decodeStripeEvent(ev.Payload)
	if err != nil {
		return ledger.Permanent(fmt.Errorf("decode subscription event: %w", err))
	}
	obj := se.Data.Object
	if obj.ID == "" || se.Created <= 0 {
		return ledger.Permanent(errors.New("subscription event without data.object.id or created"))
	}
	status := obj.Status
	if ev.Type == "customer.subscription.deleted" {
		status = "canceled"
	}
	s := state{
		Namespace:  ev.Namespace,
		Provider:   "stripe",
		ExternalID: obj.ID,
		CustomerID: provider.StripeID(obj.Customer),
		Plan:       obj.plan(),
		Status:     status,
		Version:    se.Created,
		Rank:       rankOf(status, ev.Type),
		EventID:    ev.EventID,
	}
	// A tie's truth is one API call away, but never inside the apply: the
	// call goes out from a job of its own, committed with this apply.
	s.refetchTie = m.cfg.StripeAPI.Key != ""
	m.stage(tx, s)
	return nil
}

// paddleEvent is the part of a Paddle Billing subscription.* event used.
type paddleEvent struct {
	OccurredAt time.Time
	Data       struct {
		ID, Status, CustomerID string
		// Plan is the first item's price id.
		Plan string
	}
}

// decodePaddleEvent reads a Paddle subscription event in one pass, under
// exact keys, as payload::jsonb reads them.
func decodePaddleEvent(payload []byte) (paddleEvent, error) {
	var (
		pe       paddleEvent
		occurred string
	)
	d := &pe.Data
	err := provider.DecodeFields(payload, provider.Field{Name: "occurred_at", Dst: &occurred},
		provider.Field{Name: "data", Fields: []provider.Field{
			{Name: "id", Dst: &d.ID}, {Name: "status", Dst: &d.Status}, {Name: "customer_id", Dst: &d.CustomerID},
			{Name: "items", List: true, Fields: []provider.Field{{Name: "price", Fields: []provider.Field{{Name: "id", Dst: &d.Plan}}}}},
		}})
	if err != nil {
		return pe, err
	}
	if occurred != "" {
		if pe.OccurredAt, err = time.Parse(time.RFC3339Nano, occurred); err != nil {
			return pe, fmt.Errorf("occurred_at: %w", err)
		}
	}
	return pe, nil
}

// applyPaddle writes a Paddle subscription; its version is the event's
// occurred_at in Unix microseconds.
func (m *module) applyPaddle(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	pe, err := decodePaddleEvent(ev.Payload)
	if err != nil {
		return ledger.Permanent(fmt.Errorf("decode paddle subscription event: %w", err))
	}
	if pe.Data.ID == "" || pe.OccurredAt.IsZero() {
		return ledger.Permanent(errors.New("paddle subscription event without data.id or occurred_at"))
	}
	m.stage(tx, state{
		Namespace:  ev.Namespace,
		Provider:   "paddle",
		ExternalID: pe.Data.ID,
		CustomerID: pe.Data.CustomerID,
		Plan:       pe.Data.Plan,
		Status:     pe.Data.Status,
		Version:    pe.OccurredAt.UnixMicro(),
		Rank:       rankOf(pe.Data.Status, ev.Type),
		EventID:    ev.EventID,
	})
	return nil
}

func (m *module) count(w written) {
	switch w {
	case stale:
		m.cfg.Metrics.StaleSkipped.WithLabelValues(entsub.Table).Inc()
	case tieKept:
		m.cfg.Metrics.VersionTies.WithLabelValues(entsub.Table, "kept").Inc()
	case tieApplied:
		m.cfg.Metrics.VersionTies.WithLabelValues(entsub.Table, "applied").Inc()
	}
}

// statusRank orders statuses along the subscription lifecycle; terminal
// statuses rank highest.
var statusRank = map[string]int{
	"incomplete":         1,
	"trialing":           2,
	"active":             3,
	"past_due":           4,
	"unpaid":             5,
	"paused":             5,
	"canceled":           9,
	"incomplete_expired": 9,
}

// rankOf is the precedence of a state at an equal version: lifecycle
// first, then the event type (created < updated < deleted).
func rankOf(status, eventType string) int {
	typeRank := 0
	switch {
	case strings.HasSuffix(eventType, ".updated"):
		typeRank = 1
	case strings.HasSuffix(eventType, ".deleted"), strings.HasSuffix(eventType, ".canceled"):
		typeRank = 2
	}
	return statusRank[status]*10 + typeRank
}
