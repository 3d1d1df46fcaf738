package invoice

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/hookledger/hookledger/modules/core/drift"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// StripeDrift checks the module's Stripe rows against Stripe's invoices
// (drift.Module): status, amount due, amount paid, currency and customer.
// Every invoice Stripe lists is one the module records (from its
// invoice.created on), so one hookledger lacks is drift. Stripe deletes
// only drafts, and the module does not apply invoice.deleted: a stored
// draft Stripe no longer has was deleted, and is no drift.
//
// A repair is the invoice as Stripe answered it, in an invoice.updated
// event (what Stripe sends for any change of an invoice): applied by the
// module's handler under its version guard, so a row an event has moved
// past Stripe's answer stays as it is. It is never an invoice.paid, which
// the payment module applies too (a payment and its receipt): that
// module's drift checks its own rows. A stored invoice that Stripe does
// not have, and is not a draft, is reported and never repaired: the
// module never deletes a row.
type StripeDrift struct {
	DB  *sql.DB
	API provider.StripeAPI
}

var _ drift.Module = (*StripeDrift)(nil)

// Kind names the module's objects.
func (d *StripeDrift) Kind() string { return "invoice" }

// List pages GET /v1/invoices (every status but deleted drafts).
func (d *StripeDrift) List(ctx context.Context, since time.Time, page func([]drift.Object) error) error {
	return drift.StripeList(ctx, d.API, "/v1/invoices", nil, since, func(at time.Time, data []json.RawMessage) error {
		objs := make([]drift.Object, len(data))
		for i, raw := range data {
			var err error
			if objs[i], err = invoiceDrift(raw, at); err != nil {
				return err
			}
		}
		return page(objs)
	})
}

// Fetch reads GET /v1/invoices/{id}.
func (d *StripeDrift) Fetch(ctx context.Context, id string) (drift.Object, error) {
	var raw json.RawMessage
	at, err := drift.StripeGet(ctx, d.API, "/v1/invoices/"+url.PathEscape(id), &raw)
	if err != nil {
		return drift.Object{}, err
	}
	obj, err := invoiceDrift(raw, at)
	if err == nil && obj.ID != id {
		err = fmt.Errorf("GET /v1/invoices/%s answered invoice %q", id, obj.ID)
	}
	return obj, err
}

// driftInvoice is the part of an invoice compared.
type driftInvoice struct {
	ID         string          `json:"id"`
	Status     string          `json:"status"`
	AmountDue  int64           `json:"amount_due"`
	AmountPaid int64           `json:"amount_paid"`
	Currency   string          `json:"currency"`
	Customer   json.RawMessage `json:"customer"`
}

func invoiceDrift(raw json.RawMessage, at time.Time) (drift.Object, error) {
	var in driftInvoice
	if err := json.Unmarshal(raw, &in); err != nil || in.ID == "" {
		return drift.Object{}, fmt.Errorf("an invoice without an id, or not JSON: %.200s", raw)
	}
	return drift.Object{ID: in.ID, Raw: raw, At: at,
		State: invoiceState(in.Status, in.AmountDue, in.AmountPaid, in.Currency, provider.StripeID(in.Customer))}, nil
}

// invoiceState is an invoice, stored or Stripe's, in the terms compared.
func invoiceState(status string, due, paid int64, currency, customer string) drift.State {
	return drift.State{
		"status": status, "amount_due": strconv.FormatInt(due, 10), "amount_paid": strconv.FormatInt(paid, 10),
		"currency": currency, "customer_id": customer,
	}
}

// Rows reads the namespace's Stripe invoice rows a selection names.
func (d *StripeDrift) Rows(ctx context.Context, sel drift.Selection) ([]drift.Row, error) {
	return drift.ReadRows(ctx, d.DB, sel, drift.RowQuery{
		Select: `SELECT external_id, customer_id, status, amount_due, amount_paid, currency, version, event_id FROM invoice
			WHERE namespace = $1 AND provider = 'stripe'`,
		ID: "external_id", Updated: "updated_at",
		Scan: func(rows *sql.Rows) (drift.Row, error) {
			var (
				r                          drift.Row
				customer, status, currency string
				due, paid                  int64
			)
			err := rows.Scan(&r.ID, &customer, &status, &due, &paid, &currency, &r.Version, &r.EventID)
			r.At, r.State = time.Unix(r.Version, 0), invoiceState(status, due, paid, currency, customer)
			return r, err
		},
	}, "invoices")
}

// driftFields are the fields a row and an invoice are compared on.
var driftFields = []string{"status", "amount_due", "amount_paid", "currency", "customer_id"}

// Compare reports the fields that differ. A stored draft Stripe does not
// have was deleted, which the module does not record: no drift.
func (d *StripeDrift) Compare(row *drift.Row, obj *drift.Object) ([]drift.Diff, bool) {
	switch {
	case row == nil:
		return drift.Fields(drift.State{}, obj.State, driftFields...), true
	case obj == nil:
		return drift.Fields(row.State, drift.State{}, driftFields...), row.State["status"] != "draft"
	}
	diffs := drift.Fields(row.State, obj.State, driftFields...)
	return diffs, len(diffs) > 0
}

// Repair is Stripe's invoice in an invoice.updated event.
func (d *StripeDrift) Repair(_ *drift.Row, obj *drift.Object) (drift.Repair, error) {
	if obj == nil {
		return drift.Repair{}, fmt.Errorf("%w: Stripe has no such invoice, and the invoice module never deletes one", drift.ErrCannotRepair)
	}
	return drift.Repair{Type: "invoice.updated", Object: obj.Raw}, nil
}
