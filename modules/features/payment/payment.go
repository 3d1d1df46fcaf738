package payment

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
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

// merge writes p into the payment table: a new row, or a merge that only
// moves amounts, refunds and version forward, whatever the order of events.
// It reports whether this call created the row.
func merge(ctx context.Context, tx *ledger.Tx, p Payment) (bool, error) {
	var inserted bool
	err := tx.QueryRowContext(ctx, `
		INSERT INTO payment AS p (provider, external_id, customer_id, amount, amount_refunded, currency, status, version, namespace)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
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
		RETURNING (xmax = 0)`,
		p.Provider, p.ExternalID, p.CustomerID, p.Amount, p.AmountRefunded, p.Currency,
		statusOf(p.Amount, p.AmountRefunded), p.Version, p.Namespace,
	).Scan(&inserted)
	if err != nil {
		return false, fmt.Errorf("merge payment %s/%s: %w", p.Provider, p.ExternalID, err)
	}
	return inserted, nil
}

// record merges p and, when the row is new, enqueues its one receipt. The
// receipts of a batch are inserted together, in one statement, by a write
// staged in the apply transaction: still in the transaction that creates
// their rows.
func (m *module) record(ctx context.Context, tx *ledger.Tx, ev *ledger.Event, p Payment) error {
	p.Namespace = ev.Namespace
	created, err := merge(ctx, tx, p)
	if err != nil || !created {
		return err
	}
	r := ledger.Stage(tx, receiptsKey{}, func() *receipts { return &receipts{} })
	r.jobs = append(r.jobs, river.InsertManyParams{Args: ReceiptArgs{PaymentID: p.ExternalID, Provider: p.Provider, Namespace: p.Namespace}})
	return nil
}

// receiptsKey stages the receipt jobs of a batch.
type receiptsKey struct{}

// receipts is the receipt jobs of the payments a batch created.
type receipts struct{ jobs []river.InsertManyParams }

// Flush inserts the receipt jobs.
func (r *receipts) Flush(ctx context.Context, tx *ledger.Tx) error {
	return tx.InsertJobs(ctx, r.jobs)
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
	var e struct {
		OccurredAt time.Time `json:"occurred_at"`
		Data       struct {
			ID           string `json:"id"`
			CustomerID   string `json:"customer_id"`
			CurrencyCode string `json:"currency_code"`
			Details      struct {
				Totals struct {
					GrandTotal string `json:"grand_total"`
				} `json:"totals"`
			} `json:"details"`
		} `json:"data"`
	}
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return ledger.Permanent(fmt.Errorf("decode transaction.completed: %w", err))
	}
	if e.Data.ID == "" {
		return ledger.Permanent(errors.New("transaction.completed without data.id"))
	}
	amount, err := strconv.ParseInt(e.Data.Details.Totals.GrandTotal, 10, 64)
	if err != nil {
		return ledger.Permanent(fmt.Errorf("transaction %s grand_total %q: %w", e.Data.ID, e.Data.Details.Totals.GrandTotal, err))
	}
	return m.record(ctx, tx, ev, Payment{
		Provider: "paddle", ExternalID: e.Data.ID, CustomerID: e.Data.CustomerID,
		Amount: amount, Currency: e.Data.CurrencyCode, Version: e.OccurredAt.UnixMicro(),
	})
}
