package subscription

import (
	"context"
	"database/sql"
	"encoding/json"
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

// Register adds the module's event handlers, its write and its re-fetch
// worker.
func Register(reg *ledger.Registry, cfg Config) {
	m := &module{cfg: cfg}
	m.states = ledger.NewWrite(reg, ledger.WriteFuncs[subKey, state]{Merge: m.merge, Load: loadStates, Flush: flushStates})
	for _, t := range stripeTypes {
		ledger.On(reg, "stripe", t, m.applyStripe)
	}
	for _, t := range paddleTypes {
		ledger.On(reg, "paddle", t, m.applyPaddle)
	}
	ledger.AddWorker(reg, &refetchWorker{cfg: cfg})
	reg.Erase(erase)
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
	cfg    Config
	states *ledger.Write[subKey, state]
}

// stripeEvent is the part of a Stripe customer.subscription.* event used.
type stripeEvent struct {
	Created  int64                 `field:"created,required"`
	ID       string                `field:"data.object.id,required"`
	Customer provider.ExpandableID `field:"data.object.customer"`
	Status   string                `field:"data.object.status"`
	// The first item's price id, or on old API versions its plan's.
	Price string `field:"data.object.items.data.0.price.id"`
	Plan  string `field:"data.object.items.data.0.plan.id"`
}

// stripeSubscription is the part of a Stripe subscription used, as the
// API answers it (refetch.go).
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
	return planOf(o.Items.Data[0].Price.ID, o.Items.Data[0].Plan.ID)
}

// planOf is a first item's price id, else its legacy plan id.
func planOf(price, plan string) string {
	if price != "" {
		return price
	}
	return plan
}

// applyStripe writes a Stripe subscription; its version is the event's
// created, in Unix seconds, which cannot be before 1970.
func (m *module) applyStripe(_ context.Context, tx *ledger.Tx, ev *ledger.Event, se stripeEvent) error {
	if se.Created < 0 {
		return ledger.Permanent(fmt.Errorf("%s of %s: created %d is before 1970", ev.Type, se.ID, se.Created))
	}
	status := se.Status
	if ev.Type == "customer.subscription.deleted" {
		status = "canceled"
	}
	m.states.Put(tx, subKey{Namespace: ev.Namespace, Provider: "stripe", ExternalID: se.ID}, state{
		CustomerID: string(se.Customer),
		Plan:       planOf(se.Price, se.Plan),
		Status:     status,
		Version:    se.Created,
		Rank:       rankOf(status, ev.Type),
		EventID:    ev.EventID,
		// A tie's truth is one API call away, but never inside the apply:
		// the call goes out from a job of its own, committed with this
		// apply.
		refetchTie: m.cfg.StripeAPI.Key != "",
	})
	return nil
}

// paddleEvent is the part of a Paddle Billing subscription.* event used.
type paddleEvent struct {
	OccurredAt time.Time `field:"occurred_at,required"`
	ID         string    `field:"data.id,required"`
	Status     string    `field:"data.status"`
	CustomerID string    `field:"data.customer_id"`
	// Plan is the first item's price id.
	Plan string `field:"data.items.0.price.id"`
}

// applyPaddle writes a Paddle subscription; its version is the event's
// occurred_at in Unix microseconds.
func (m *module) applyPaddle(_ context.Context, tx *ledger.Tx, ev *ledger.Event, pe paddleEvent) error {
	m.states.Put(tx, subKey{Namespace: ev.Namespace, Provider: "paddle", ExternalID: pe.ID}, state{
		CustomerID: pe.CustomerID,
		Plan:       pe.Plan,
		Status:     pe.Status,
		Version:    pe.OccurredAt.UnixMicro(),
		Rank:       rankOf(pe.Status, ev.Type),
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
