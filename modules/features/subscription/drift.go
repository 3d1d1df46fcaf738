package subscription

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/hookledger/hookledger/ent"
	entsub "github.com/hookledger/hookledger/ent/subscription"
	"github.com/hookledger/hookledger/modules/core/drift"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// StripeDrift checks the module's Stripe rows against Stripe's
// subscriptions (drift.Module): status, plan and customer. A subscription
// that one side lacks and the other has ended (canceled,
// incomplete_expired) grants nothing on either side: it is not drift. A
// repair is the subscription as Stripe answered it, in a
// customer.subscription.updated (deleted when canceled) event; a row
// Stripe does not have is ended by a customer.subscription.deleted.
type StripeDrift struct {
	DB  *sql.DB
	API provider.StripeAPI
}

var _ drift.Module = (*StripeDrift)(nil)

// Kind names the module's objects.
func (d *StripeDrift) Kind() string { return "subscription" }

// List pages GET /v1/subscriptions, every status (Stripe lists only those
// not canceled by default).
func (d *StripeDrift) List(ctx context.Context, since time.Time, page func([]drift.Object) error) error {
	return drift.StripeList(ctx, d.API, "/v1/subscriptions", url.Values{"status": {"all"}}, since, func(at time.Time, data []json.RawMessage) error {
		objs := make([]drift.Object, len(data))
		for i, raw := range data {
			var err error
			if objs[i], err = subscriptionDrift(raw, at); err != nil {
				return err
			}
		}
		return page(objs)
	})
}

// Fetch reads GET /v1/subscriptions/{id}.
func (d *StripeDrift) Fetch(ctx context.Context, id string) (drift.Object, error) {
	var raw json.RawMessage
	at, err := drift.StripeGet(ctx, d.API, "/v1/subscriptions/"+url.PathEscape(id), &raw)
	if err != nil {
		return drift.Object{}, err
	}
	obj, err := subscriptionDrift(raw, at)
	if err == nil && obj.ID != id {
		err = fmt.Errorf("GET /v1/subscriptions/%s answered subscription %q", id, obj.ID)
	}
	return obj, err
}

func subscriptionDrift(raw json.RawMessage, at time.Time) (drift.Object, error) {
	var s stripeSubscription
	if err := json.Unmarshal(raw, &s); err != nil || s.ID == "" {
		return drift.Object{}, fmt.Errorf("a subscription without an id, or not JSON: %.200s", raw)
	}
	return drift.Object{ID: s.ID, Raw: raw, At: at, State: drift.State{
		"status": s.Status, "plan": s.plan(), "customer_id": provider.StripeID(s.Customer),
	}}, nil
}

// Rows reads the namespace's Stripe subscription rows a selection names.
func (d *StripeDrift) Rows(ctx context.Context, sel drift.Selection) ([]drift.Row, error) {
	if sel.IDs != nil && len(sel.IDs) == 0 {
		return nil, nil
	}
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, d.DB)))
	q := client.Subscription.Query().Where(entsub.Namespace(sel.Namespace), entsub.Provider("stripe"))
	if sel.IDs != nil {
		q = q.Where(entsub.ExternalIDIn(sel.IDs...))
	} else {
		if !sel.Since.IsZero() {
			q = q.Where(entsub.UpdatedAtGTE(sel.Since))
		}
		if sel.After != "" {
			q = q.Where(entsub.ExternalIDGT(sel.After))
		}
		q = q.Order(ent.Asc(entsub.FieldExternalID)).Limit(sel.Limit)
	}
	subs, err := q.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("read subscriptions of %s: %w", sel.Namespace, err)
	}
	rows := make([]drift.Row, len(subs))
	for i, s := range subs {
		rows[i] = drift.Row{ID: s.ExternalID, Version: s.Version, At: time.Unix(s.Version, 0), EventID: s.EventID, State: drift.State{
			"status": s.Status, "plan": s.Plan, "customer_id": s.CustomerID,
		}}
	}
	return rows, nil
}

// driftFields are the fields a row and a subscription are compared on.
var driftFields = []string{"status", "plan", "customer_id"}

// Compare reports the fields that differ. A side that lacks the
// subscription while the other has ended it is no drift.
func (d *StripeDrift) Compare(row *drift.Row, obj *drift.Object) ([]drift.Diff, bool) {
	switch {
	case row == nil:
		return drift.Fields(drift.State{}, obj.State, driftFields...), !endedStatus(obj.State["status"])
	case obj == nil:
		return drift.Fields(row.State, drift.State{}, driftFields...), !endedStatus(row.State["status"])
	}
	diffs := drift.Fields(row.State, obj.State, driftFields...)
	return diffs, len(diffs) > 0
}

// endedStatus reports whether a status grants nothing any more.
func endedStatus(status string) bool { return status == "canceled" || status == "incomplete_expired" }

// Repair is Stripe's subscription in the event Stripe sends for its state;
// without one, a deletion of the stored subscription.
func (d *StripeDrift) Repair(row *drift.Row, obj *drift.Object) (drift.Repair, error) {
	if obj != nil {
		typ := "customer.subscription.updated"
		if obj.State["status"] == "canceled" {
			typ = "customer.subscription.deleted"
		}
		return drift.Repair{Type: typ, Object: obj.Raw}, nil
	}
	gone := map[string]any{"id": row.ID, "object": "subscription", "customer": row.State["customer_id"], "status": "canceled"}
	if plan := row.State["plan"]; plan != "" {
		gone["items"] = map[string]any{"data": []any{map[string]any{"price": map[string]any{"id": plan}}}}
	}
	raw, err := json.Marshal(gone)
	return drift.Repair{Type: "customer.subscription.deleted", Object: raw}, err
}
