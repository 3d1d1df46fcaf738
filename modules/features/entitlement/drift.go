package entitlement

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hookledger/hookledger/modules/core/drift"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// StripeDrift checks each customer's stored active features against
// Stripe Entitlements (drift.Module). Its object is a customer's set of
// active entitlements, by customer id: GET
// /v1/entitlements/active_entitlements?customer=..., compared with the
// customer's entitlement rows as lookup_key=feature_id pairs. Stripe
// lists entitlements only per customer, so List pages GET /v1/customers
// and asks for each one's entitlements: one request per customer listed
// (--since bounds them to customers created since). A customer without
// active features on both sides is no drift; a customer Stripe deleted
// has none.
//
// A repair is the customer's active entitlement summary as Stripe
// answered it, in an entitlements.active_entitlement_summary.updated
// event: the module's handler replaces the customer's set with it unless
// a summary of a later moment was applied, so an older answer changes
// nothing. A customer erased in the namespace is never written back.
type StripeDrift struct {
	DB  *sql.DB
	API provider.StripeAPI
}

var _ drift.Module = (*StripeDrift)(nil)

// Kind names the module's objects.
func (d *StripeDrift) Kind() string { return "entitlement" }

// driftCustomer is the part of a customer read.
type driftCustomer struct {
	ID       string `json:"id"`
	Livemode bool   `json:"livemode"`
	Deleted  bool   `json:"deleted"`
}

// List pages GET /v1/customers and reads each customer's active
// entitlements.
func (d *StripeDrift) List(ctx context.Context, since time.Time, page func([]drift.Object) error) error {
	return drift.StripeList(ctx, d.API, "/v1/customers", nil, since, func(_ time.Time, data []json.RawMessage) error {
		objs := make([]drift.Object, len(data))
		for i, raw := range data {
			var c driftCustomer
			if err := json.Unmarshal(raw, &c); err != nil || c.ID == "" {
				return fmt.Errorf("a customer without an id, or not JSON: %.200s", raw)
			}
			var err error
			if objs[i], err = d.summary(ctx, c); err != nil {
				return err
			}
		}
		return page(objs)
	})
}

// Fetch reads the customer, then its active entitlements: a customer
// Stripe does not have, or has deleted, is gone.
func (d *StripeDrift) Fetch(ctx context.Context, id string) (drift.Object, error) {
	var c driftCustomer
	at, err := drift.StripeGet(ctx, d.API, "/v1/customers/"+url.PathEscape(id), &c)
	switch {
	case err != nil:
		return drift.Object{}, err
	case c.Deleted:
		return drift.Object{}, &drift.GoneError{At: at, Err: fmt.Errorf("customer %s is deleted", id)}
	case c.ID != id:
		return drift.Object{}, fmt.Errorf("GET /v1/customers/%s answered customer %q", id, c.ID)
	}
	return d.summary(ctx, c)
}

// summary reads a customer's active entitlements, every page, as the
// summary an event would carry; it is dated by Stripe's first answer.
func (d *StripeDrift) summary(ctx context.Context, c driftCustomer) (drift.Object, error) {
	var (
		at   time.Time
		list = []json.RawMessage{}
	)
	err := drift.StripeList(ctx, d.API, "/v1/entitlements/active_entitlements", url.Values{"customer": {c.ID}}, time.Time{},
		func(answered time.Time, data []json.RawMessage) error {
			if at.IsZero() {
				at = answered
			}
			list = append(list, data...)
			return nil
		})
	if err != nil {
		return drift.Object{}, fmt.Errorf("entitlements of %s: %w", c.ID, err)
	}
	features, err := featureSet(list)
	if err != nil {
		return drift.Object{}, fmt.Errorf("entitlements of %s: %w", c.ID, err)
	}
	raw, err := summaryObject(c.ID, c.Livemode, list)
	return drift.Object{ID: c.ID, Raw: raw, At: at, State: drift.State{"features": features}}, err
}

// summaryObject is an entitlements.active_entitlement_summary of customer
// listing entitlements, as Stripe's event carries it.
func summaryObject(customer string, livemode bool, entitlements []json.RawMessage) (json.RawMessage, error) {
	return json.Marshal(map[string]any{
		"object": "entitlements.active_entitlement_summary", "customer": customer, "livemode": livemode,
		"entitlements": map[string]any{"object": "list", "data": entitlements, "has_more": false,
			"url": "/v1/customers/" + customer + "/entitlements"},
	})
}

// featureSet is a list of active entitlements as the module stores a set:
// lookup_key=feature_id pairs by lookup_key (byte order), each key once,
// comma-separated.
func featureSet(list []json.RawMessage) (string, error) {
	pairs := make([][2]string, 0, len(list))
	for _, raw := range list {
		var e struct {
			LookupKey string          `json:"lookup_key"`
			Feature   json.RawMessage `json:"feature"`
		}
		if err := json.Unmarshal(raw, &e); err != nil || e.LookupKey == "" {
			return "", fmt.Errorf("an active entitlement without lookup_key, or not JSON: %.200s", raw)
		}
		pairs = append(pairs, [2]string{e.LookupKey, provider.StripeID(e.Feature)})
	}
	slices.SortStableFunc(pairs, func(a, b [2]string) int { return cmp.Compare(a[0], b[0]) })
	pairs = slices.CompactFunc(pairs, func(a, b [2]string) bool { return a[0] == b[0] })
	out := make([]string, len(pairs))
	for i, p := range pairs {
		out[i] = p[0] + "=" + p[1]
	}
	return strings.Join(out, ","), nil
}

// Rows reads the namespace's Stripe summaries a selection names, each with
// its customer's entitlement rows as a set.
func (d *StripeDrift) Rows(ctx context.Context, sel drift.Selection) ([]drift.Row, error) {
	return drift.ReadRows(ctx, d.DB, sel, drift.RowQuery{
		Select: `SELECT s.customer_id, s.version, s.event_id,
				COALESCE((SELECT string_agg(e.lookup_key || '=' || e.feature_id, ',' ORDER BY e.lookup_key COLLATE "C")
					FROM entitlement e WHERE e.namespace = s.namespace AND e.provider = s.provider AND e.customer_id = s.customer_id), '')
			FROM entitlement_summary s WHERE s.namespace = $1 AND s.provider = 'stripe'`,
		ID: "s.customer_id", Updated: "s.updated_at",
		Scan: func(rows *sql.Rows) (drift.Row, error) {
			var (
				r        drift.Row
				features string
			)
			err := rows.Scan(&r.ID, &r.Version, &r.EventID, &features)
			r.At, r.State = time.Unix(r.Version, 0), drift.State{"features": features}
			return r, err
		},
	}, "entitlements")
}

// Compare reports whether the sets differ; a customer one side lacks has
// no active features there.
func (d *StripeDrift) Compare(row *drift.Row, obj *drift.Object) ([]drift.Diff, bool) {
	stored, stripe := drift.State{}, drift.State{}
	if row != nil {
		stored = row.State
	}
	if obj != nil {
		stripe = obj.State
	}
	diffs := drift.Fields(stored, stripe, "features")
	return diffs, len(diffs) > 0
}

// Repair is Stripe's summary of the customer; a customer Stripe does not
// have gets an empty one.
func (d *StripeDrift) Repair(row *drift.Row, obj *drift.Object) (drift.Repair, error) {
	if obj != nil {
		return drift.Repair{Type: Type, Object: obj.Raw}, nil
	}
	raw, err := summaryObject(row.ID, false, []json.RawMessage{})
	return drift.Repair{Type: Type, Object: raw}, err
}
