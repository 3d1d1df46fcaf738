package payment

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/hookledger/hookledger/ent"
	entpay "github.com/hookledger/hookledger/ent/payment"
	"github.com/hookledger/hookledger/modules/core/drift"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// StripeDrift checks the module's Stripe rows against Stripe's payment
// intents (drift.Module): amount, amount refunded (the latest charge's),
// currency, customer and status. Only a succeeded payment intent makes a
// payment, so one in another status that hookledger lacks is no drift; a
// row keyed on a charge (paid without a payment intent) is checked against
// GET /v1/charges/{id}.
//
// A repair goes through the module's merge, which only grows amounts and
// fills an empty currency or customer: a payment whose refund hookledger
// missed, or that it lacks, is repaired (a charge.refunded carrying the
// charge when something was refunded, else a payment_intent.succeeded); a
// stored amount above Stripe's, another currency or customer, or a payment
// Stripe does not have is reported and never repaired.
type StripeDrift struct {
	DB  *sql.DB
	API provider.StripeAPI
}

var _ drift.Module = (*StripeDrift)(nil)

// Kind names the module's objects.
func (d *StripeDrift) Kind() string { return "payment" }

// List pages GET /v1/payment_intents with each one's latest charge.
func (d *StripeDrift) List(ctx context.Context, since time.Time, page func([]drift.Object) error) error {
	q := url.Values{"expand[]": {"data.latest_charge"}}
	return drift.StripeList(ctx, d.API, "/v1/payment_intents", q, since, func(at time.Time, data []json.RawMessage) error {
		objs := make([]drift.Object, len(data))
		for i, raw := range data {
			var err error
			if objs[i], err = intentDrift(raw, at); err != nil {
				return err
			}
		}
		return page(objs)
	})
}

// Fetch reads a payment intent with its latest charge, or a charge for a
// row keyed on one.
func (d *StripeDrift) Fetch(ctx context.Context, id string) (drift.Object, error) {
	var (
		raw  json.RawMessage
		path = "/v1/payment_intents/" + url.PathEscape(id) + "?expand[]=latest_charge"
		read = intentDrift
	)
	if strings.HasPrefix(id, "ch_") {
		path, read = "/v1/charges/"+url.PathEscape(id), chargeDrift
	}
	at, err := drift.StripeGet(ctx, d.API, path, &raw)
	if err != nil {
		return drift.Object{}, err
	}
	obj, err := read(raw, at)
	if err == nil && obj.ID != id {
		err = fmt.Errorf("GET %s answered %q", path, obj.ID)
	}
	return obj, err
}

// driftIntent is the part of a payment intent compared.
type driftIntent struct {
	ID             string          `json:"id"`
	Status         string          `json:"status"`
	Amount         int64           `json:"amount"`
	AmountReceived int64           `json:"amount_received"`
	Currency       string          `json:"currency"`
	Customer       json.RawMessage `json:"customer"`
	LatestCharge   json.RawMessage `json:"latest_charge"`
}

// driftCharge is the part of a charge compared.
type driftCharge struct {
	ID             string          `json:"id"`
	Status         string          `json:"status"`
	Amount         int64           `json:"amount"`
	AmountRefunded int64           `json:"amount_refunded"`
	Currency       string          `json:"currency"`
	Customer       json.RawMessage `json:"customer"`
}

func intentDrift(raw json.RawMessage, at time.Time) (drift.Object, error) {
	var pi driftIntent
	if err := json.Unmarshal(raw, &pi); err != nil || pi.ID == "" {
		return drift.Object{}, fmt.Errorf("a payment intent without an id, or not JSON: %.200s", raw)
	}
	var ch driftCharge
	if charge := pi.LatestCharge; len(charge) > 0 && charge[0] == '{' {
		if err := json.Unmarshal(charge, &ch); err != nil {
			return drift.Object{}, fmt.Errorf("payment intent %s: latest_charge: %w", pi.ID, err)
		}
	}
	amount := pi.AmountReceived
	if amount == 0 {
		amount = pi.Amount
	}
	return paymentDrift(pi.ID, raw, at, pi.Status, amount, ch.AmountRefunded, pi.Currency, pi.Customer), nil
}

func chargeDrift(raw json.RawMessage, at time.Time) (drift.Object, error) {
	var ch driftCharge
	if err := json.Unmarshal(raw, &ch); err != nil || ch.ID == "" {
		return drift.Object{}, fmt.Errorf("a charge without an id, or not JSON: %.200s", raw)
	}
	return paymentDrift(ch.ID, raw, at, ch.Status, ch.Amount, ch.AmountRefunded, ch.Currency, ch.Customer), nil
}

// paymentDrift is an object in the row's terms: a succeeded payment's
// status follows from its amounts, as the row's does; any other is
// Stripe's own.
func paymentDrift(id string, raw json.RawMessage, at time.Time, status string, amount, refunded int64, currency string, customer json.RawMessage) drift.Object {
	if status == "succeeded" {
		status = statusOf(amount, refunded)
	}
	return drift.Object{ID: id, Raw: raw, At: at, State: drift.State{
		"status": status, "amount": strconv.FormatInt(amount, 10), "amount_refunded": strconv.FormatInt(refunded, 10),
		"currency": currency, "customer_id": provider.StripeID(customer),
	}}
}

// Rows reads the namespace's Stripe payment rows a selection names.
func (d *StripeDrift) Rows(ctx context.Context, sel drift.Selection) ([]drift.Row, error) {
	if sel.IDs != nil && len(sel.IDs) == 0 {
		return nil, nil
	}
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, d.DB)))
	q := client.Payment.Query().Where(entpay.Namespace(sel.Namespace), entpay.Provider("stripe"))
	if sel.IDs != nil {
		q = q.Where(entpay.ExternalIDIn(sel.IDs...))
	} else {
		if !sel.Since.IsZero() {
			q = q.Where(entpay.UpdatedAtGTE(sel.Since))
		}
		if sel.After != "" {
			q = q.Where(entpay.ExternalIDGT(sel.After))
		}
		q = q.Order(ent.Asc(entpay.FieldExternalID)).Limit(sel.Limit)
	}
	pays, err := q.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("read payments of %s: %w", sel.Namespace, err)
	}
	rows := make([]drift.Row, len(pays))
	for i, p := range pays {
		rows[i] = drift.Row{ID: p.ExternalID, Version: p.Version, At: time.Unix(p.Version, 0), State: drift.State{
			"status": string(p.Status), "amount": strconv.FormatInt(p.Amount, 10), "amount_refunded": strconv.FormatInt(p.AmountRefunded, 10),
			"currency": p.Currency, "customer_id": p.CustomerID,
		}}
	}
	return rows, nil
}

// driftFields are the fields a row and a payment are compared on.
var driftFields = []string{"status", "amount", "amount_refunded", "currency", "customer_id"}

// Compare reports the fields that differ. A payment Stripe has that did
// not succeed makes no row, and is no drift when hookledger lacks it.
func (d *StripeDrift) Compare(row *drift.Row, obj *drift.Object) ([]drift.Diff, bool) {
	switch {
	case row == nil:
		return drift.Fields(drift.State{}, obj.State, driftFields...), recordedStatus(obj.State["status"])
	case obj == nil:
		return drift.Fields(row.State, drift.State{}, driftFields...), true
	}
	diffs := drift.Fields(row.State, obj.State, driftFields...)
	return diffs, len(diffs) > 0
}

// recordedStatus reports whether a status is one the payment table holds.
func recordedStatus(status string) bool {
	return status == "succeeded" || status == "partially_refunded" || status == "refunded"
}

// Repair is the event whose merge brings the row to Stripe's payment, when
// the merge can.
func (d *StripeDrift) Repair(row *drift.Row, obj *drift.Object) (drift.Repair, error) {
	switch {
	case obj == nil:
		return drift.Repair{}, fmt.Errorf("%w: Stripe has no such payment, and the payment module never deletes one", drift.ErrCannotRepair)
	case !recordedStatus(obj.State["status"]):
		return drift.Repair{}, fmt.Errorf("%w: Stripe's payment is %s, and the payment module records succeeded payments only", drift.ErrCannotRepair, obj.State["status"])
	case row != nil && !mergeMoves(row.State, obj.State):
		return drift.Repair{}, fmt.Errorf("%w: the payment merge only grows amounts and fills an empty currency or customer (%s)",
			drift.ErrCannotRepair, drift.Describe(drift.Fields(row.State, obj.State, driftFields...)))
	}
	if strings.HasPrefix(obj.ID, "ch_") {
		return drift.Repair{Type: "charge.refunded", Object: obj.Raw}, nil
	}
	if obj.State["amount_refunded"] != "0" {
		var pi driftIntent
		if err := json.Unmarshal(obj.Raw, &pi); err != nil {
			return drift.Repair{}, err
		}
		return drift.Repair{Type: "charge.refunded", Object: pi.LatestCharge}, nil
	}
	return drift.Repair{Type: "payment_intent.succeeded", Object: obj.Raw}, nil
}

// mergeMoves reports whether merging Stripe's state into the stored one would
// change it.
func mergeMoves(stored, stripe drift.State) bool {
	grows := func(f string) bool {
		s, _ := strconv.ParseInt(stored[f], 10, 64)
		p, _ := strconv.ParseInt(stripe[f], 10, 64)
		return p > s
	}
	fills := func(f string) bool { return stored[f] == "" && stripe[f] != "" }
	return grows("amount") || grows("amount_refunded") || fills("currency") || fills("customer_id")
}
