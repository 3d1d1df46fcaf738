package payment

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/riverqueue/river"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// Config holds the module's dependencies.
type Config struct {
	DB     *sql.DB
	Sender ReceiptSender
}

// Register adds the module's handlers and its receipt worker.
func Register(reg *ledger.Registry, cfg Config) {
	m := &module{cfg: cfg}
	reg.Handle("stripe", "payment_intent.succeeded", m.stripePaymentIntent)
	reg.Handle("stripe", "charge.refunded", m.stripeChargeRefunded)
	reg.Handle("stripe", "invoice.paid", m.stripeInvoicePaid)
	reg.Handle("paddle", "transaction.completed", m.paddleTransaction)
	ledger.AddWorker(reg, &receiptWorker{cfg: cfg})
}

type module struct {
	cfg Config
}

// Payment is one provider payment as an event describes it.
type Payment struct {
	// Namespace is the ledger namespace of the event: each account's
	// payments are its own.
	Namespace      string
	Provider       string
	ExternalID     string
	CustomerID     string
	Amount         int64
	AmountRefunded int64
	Currency       string
	Version        int64
}

// statusOf follows from the amounts.
func statusOf(amount, refunded int64) string {
	switch {
	case refunded <= 0:
		return "succeeded"
	case refunded >= amount:
		return "refunded"
	default:
		return "partially_refunded"
	}
}

// paymentsKey stages the payment merges of a batch.
type paymentsKey struct{}

// payKey is a payment row's unique key.
type payKey struct{ namespace, provider, externalID string }

// merges is the payments a batch's events describe, each folded into one
// per row: a merge only moves amounts, refunds and the version forward and
// fills an empty customer or currency, so folding in apply order and then
// merging once gives the row that merging each event in turn would.
type merges struct {
	order []payKey
	byKey map[payKey]*Payment
}

func (ms *merges) add(p Payment) {
	k := payKey{p.Namespace, p.Provider, p.ExternalID}
	f, ok := ms.byKey[k]
	if !ok {
		ms.order = append(ms.order, k)
		ms.byKey[k] = &p
		return
	}
	if f.CustomerID == "" {
		f.CustomerID = p.CustomerID
	}
	if f.Currency == "" {
		f.Currency = p.Currency
	}
	f.Amount, f.AmountRefunded, f.Version = max(f.Amount, p.Amount), max(f.AmountRefunded, p.AmountRefunded), max(f.Version, p.Version)
}

// Flush merges the batch's payments in one statement, in key order (rows
// are locked in that order, so batches that share rows wait for each
// other instead of deadlocking), and enqueues one receipt for each row it
// created, in the same transaction.
func (ms *merges) Flush(ctx context.Context, tx *ledger.Tx) error {
	slices.SortFunc(ms.order, func(a, b payKey) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.provider, b.provider), cmp.Compare(a.externalID, b.externalID))
	})
	n := len(ms.order)
	var (
		namespaces, providers, ids, customers = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		currencies, statuses                  = make([]string, n), make([]string, n)
		amounts, refunded, versions           = make([]int64, n), make([]int64, n), make([]int64, n)
	)
	for i, k := range ms.order {
		p := ms.byKey[k]
		namespaces[i], providers[i], ids[i], customers[i] = p.Namespace, p.Provider, p.ExternalID, p.CustomerID
		currencies[i], statuses[i] = p.Currency, statusOf(p.Amount, p.AmountRefunded)
		amounts[i], refunded[i], versions[i] = p.Amount, p.AmountRefunded, p.Version
	}
	rows, err := tx.QueryContext(ctx, `
		INSERT INTO payment AS p (namespace, provider, external_id, customer_id, amount, amount_refunded, currency, status, version)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::text[], $8::text[], $9::bigint[])
		ON CONFLICT (namespace, provider, external_id) DO UPDATE SET
			customer_id     = CASE WHEN p.customer_id = '' THEN EXCLUDED.customer_id ELSE p.customer_id END,
			currency        = CASE WHEN p.currency = '' THEN EXCLUDED.currency ELSE p.currency END,
			amount          = GREATEST(p.amount, EXCLUDED.amount),
			amount_refunded = GREATEST(p.amount_refunded, EXCLUDED.amount_refunded),
			status = CASE
				WHEN GREATEST(p.amount_refunded, EXCLUDED.amount_refunded) <= 0 THEN 'succeeded'
				WHEN GREATEST(p.amount_refunded, EXCLUDED.amount_refunded) >= GREATEST(p.amount, EXCLUDED.amount) THEN 'refunded'
				ELSE 'partially_refunded' END,
			version         = GREATEST(p.version, EXCLUDED.version),
			updated_at      = CURRENT_TIMESTAMP
		RETURNING p.namespace, p.provider, p.external_id, (xmax = 0)`,
		namespaces, providers, ids, customers, amounts, refunded, currencies, statuses, versions)
	if err != nil {
		return fmt.Errorf("merge %d payment(s): %w", n, err)
	}
	defer rows.Close()
	var receipts []river.InsertManyParams
	for rows.Next() {
		var (
			k       payKey
			created bool
		)
		if err := rows.Scan(&k.namespace, &k.provider, &k.externalID, &created); err != nil {
			return fmt.Errorf("merge %d payment(s): %w", n, err)
		}
		if created {
			receipts = append(receipts, river.InsertManyParams{Args: ReceiptArgs{PaymentID: k.externalID, Provider: k.provider, Namespace: k.namespace}})
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("merge %d payment(s): %w", n, err)
	}
	return tx.InsertJobs(ctx, receipts)
}

// record stages p's merge into the payment table, which runs once for the
// batch's events (merges.Flush) and enqueues the one receipt of a payment
// when it creates its row: in the transaction that creates it.
func (m *module) record(_ context.Context, tx *ledger.Tx, ev *ledger.Event, p Payment) error {
	p.Namespace = ev.Namespace
	ledger.Stage(tx, paymentsKey{}, func() *merges { return &merges{byKey: map[payKey]*Payment{}} }).add(p)
	return nil
}

// stripeObject is the data.object of the Stripe events handled here.
type stripeObject struct {
	ID             string          `json:"id"`
	Amount         int64           `json:"amount"`
	AmountReceived int64           `json:"amount_received"`
	AmountRefunded int64           `json:"amount_refunded"`
	AmountPaid     int64           `json:"amount_paid"`
	Currency       string          `json:"currency"`
	Customer       json.RawMessage `json:"customer"`
	PaymentIntent  json.RawMessage `json:"payment_intent"`
	Payments       struct {
		Data []struct {
			Payment struct {
				PaymentIntent json.RawMessage `json:"payment_intent"`
			} `json:"payment"`
		} `json:"data"`
	} `json:"payments"`
}

// decodeStripe reads the event's created and the fields of its
// data.object in the one pass of provider.DecodeFields, which skips the
// rest of the event without decoding it; only the invoice's payments list,
// small, is decoded as a whole.
func decodeStripe(ev *ledger.Event) (stripeObject, int64, error) {
	var (
		created  int64
		o        stripeObject
		payments json.RawMessage
	)
	object := []provider.Field{
		{Name: "id", Dst: &o.ID}, {Name: "amount", Dst: &o.Amount}, {Name: "amount_received", Dst: &o.AmountReceived},
		{Name: "amount_refunded", Dst: &o.AmountRefunded}, {Name: "amount_paid", Dst: &o.AmountPaid},
		{Name: "currency", Dst: &o.Currency}, {Name: "customer", Dst: &o.Customer},
		{Name: "payment_intent", Dst: &o.PaymentIntent},
		{Name: "payments", Fields: []provider.Field{{Name: "data", Dst: &payments}}},
	}
	err := provider.DecodeFields(ev.Payload, provider.Field{Name: "created", Dst: &created},
		provider.Field{Name: "data", Fields: []provider.Field{{Name: "object", Fields: object}}})
	if err == nil && len(payments) > 0 {
		err = json.Unmarshal(payments, &o.Payments.Data)
	}
	if err != nil {
		return stripeObject{}, 0, ledger.Permanent(fmt.Errorf("decode %s: %w", ev.Type, err))
	}
	if o.ID == "" {
		return stripeObject{}, 0, ledger.Permanent(fmt.Errorf("%s without data.object.id", ev.Type))
	}
	return o, created, nil
}

func (m *module) stripePaymentIntent(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	pi, created, err := decodeStripe(ev)
	if err != nil {
		return err
	}
	amount := pi.AmountReceived
	if amount == 0 {
		amount = pi.Amount
	}
	return m.record(ctx, tx, ev, Payment{
		Provider: "stripe", ExternalID: pi.ID, CustomerID: provider.StripeID(pi.Customer),
		Amount: amount, Currency: pi.Currency, Version: created,
	})
}

// stripeChargeRefunded applies a refund to the charge's PaymentIntent; the
// charge's amount_refunded is cumulative. A charge without a PaymentIntent
// is its own payment.
func (m *module) stripeChargeRefunded(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	ch, created, err := decodeStripe(ev)
	if err != nil {
		return err
	}
	id := provider.StripeID(ch.PaymentIntent)
	if id == "" {
		id = ch.ID
	}
	return m.record(ctx, tx, ev, Payment{
		Provider: "stripe", ExternalID: id, CustomerID: provider.StripeID(ch.Customer),
		Amount: ch.Amount, AmountRefunded: ch.AmountRefunded, Currency: ch.Currency, Version: created,
	})
}

// stripeInvoicePaid adds to the invoice's PaymentIntent, never a payment of
// its own.
func (m *module) stripeInvoicePaid(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	inv, created, err := decodeStripe(ev)
	if err != nil {
		return err
	}
	pi := provider.StripeID(inv.PaymentIntent)
	for _, p := range inv.Payments.Data {
		if pi == "" {
			pi = provider.StripeID(p.Payment.PaymentIntent)
		}
	}
	if pi == "" {
		return nil // paid without a PaymentIntent (credit, out of band): nothing to record
	}
	return m.record(ctx, tx, ev, Payment{
		Provider: "stripe", ExternalID: pi, CustomerID: provider.StripeID(inv.Customer),
		Amount: inv.AmountPaid, Currency: inv.Currency, Version: created,
	})
}

func (m *module) paddleTransaction(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	// Exact keys, as payload::jsonb reads them.
	var e struct {
		OccurredAt time.Time
		Data       struct {
			ID, CustomerID, CurrencyCode, GrandTotal string
		}
	}
	var occurred string
	err := provider.DecodeFields(ev.Payload, provider.Field{Name: "occurred_at", Dst: &occurred},
		provider.Field{Name: "data", Fields: []provider.Field{
			{Name: "id", Dst: &e.Data.ID}, {Name: "customer_id", Dst: &e.Data.CustomerID}, {Name: "currency_code", Dst: &e.Data.CurrencyCode},
			{Name: "details", Fields: []provider.Field{{Name: "totals", Fields: []provider.Field{{Name: "grand_total", Dst: &e.Data.GrandTotal}}}}},
		}})
	if err == nil && occurred != "" {
		e.OccurredAt, err = time.Parse(time.RFC3339Nano, occurred)
	}
	if err != nil {
		return ledger.Permanent(fmt.Errorf("decode transaction.completed: %w", err))
	}
	if e.Data.ID == "" {
		return ledger.Permanent(errors.New("transaction.completed without data.id"))
	}
	amount, err := strconv.ParseInt(e.Data.GrandTotal, 10, 64)
	if err != nil {
		return ledger.Permanent(fmt.Errorf("transaction %s grand_total %q: %w", e.Data.ID, e.Data.GrandTotal, err))
	}
	return m.record(ctx, tx, ev, Payment{
		Provider: "paddle", ExternalID: e.Data.ID, CustomerID: e.Data.CustomerID,
		Amount: amount, Currency: e.Data.CurrencyCode, Version: e.OccurredAt.UnixMicro(),
	})
}
