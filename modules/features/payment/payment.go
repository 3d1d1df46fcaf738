package payment

import (
	"context"
	"database/sql"
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
	m.payments = ledger.NewWrite(reg, ledger.WriteFuncs[payKey, Payment]{Merge: mergePayment, Flush: flushPayments})
	ledger.On(reg, "stripe", "payment_intent.succeeded", m.stripePaymentIntent)
	ledger.On(reg, "stripe", "charge.refunded", m.stripeChargeRefunded)
	ledger.On(reg, "stripe", "invoice.paid", m.stripeInvoicePaid)
	ledger.On(reg, "paddle", "transaction.completed", m.paddleTransaction)
	ledger.AddWorker(reg, &receiptWorker{cfg: cfg})
	reg.Erase(erase)
}

type module struct {
	cfg      Config
	payments *ledger.Write[payKey, Payment]
}

// Payment is one provider payment as an event describes it.
type Payment struct {
	CustomerID     string
	Amount         int64
	AmountRefunded int64
	Currency       string
	Version        int64
}

// payKey is a payment row's unique key. Namespace is the ledger namespace
// of the event: each account's payments are its own.
type payKey struct{ Namespace, Provider, ExternalID string }

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

// mergePayment folds two events' payments of one row: amounts, refunds
// and the version only move forward and an empty customer or currency is
// filled, which is also how the row merges them (flushPayments), so
// folding a batch's events first and merging once gives the row that
// merging each event in turn would.
func mergePayment(older, newer Payment) Payment {
	if older.CustomerID == "" {
		older.CustomerID = newer.CustomerID
	}
	if older.Currency == "" {
		older.Currency = newer.Currency
	}
	older.Amount, older.AmountRefunded = max(older.Amount, newer.Amount), max(older.AmountRefunded, newer.AmountRefunded)
	older.Version = max(older.Version, newer.Version)
	return older
}

// paymentRow is a payment as flushPayments writes its row.
type paymentRow struct {
	Namespace      string `col:"namespace"`
	Provider       string `col:"provider"`
	ExternalID     string `col:"external_id"`
	CustomerID     string `col:"customer_id"`
	Amount         int64  `col:"amount"`
	AmountRefunded int64  `col:"amount_refunded"`
	Currency       string `col:"currency"`
	Status         string `col:"status"`
	Version        int64  `col:"version"`
}

// flushPayments merges the batch's payments into their rows in one
// statement, and enqueues one receipt for each row it created, in the same
// transaction.
func flushPayments(ctx context.Context, tx *ledger.Tx, entries []ledger.Entry[payKey, Payment]) error {
	n := len(entries)
	pays := make([]paymentRow, n)
	for i, e := range entries {
		k, p := e.Key, e.Value
		pays[i] = paymentRow{
			Namespace: k.Namespace, Provider: k.Provider, ExternalID: k.ExternalID, CustomerID: p.CustomerID,
			Amount: p.Amount, AmountRefunded: p.AmountRefunded, Currency: p.Currency, Status: statusOf(p.Amount, p.AmountRefunded), Version: p.Version,
		}
	}
	from, args := ledger.Unnest(pays, 1)
	rows, err := tx.QueryContext(ctx, `
		INSERT INTO payment AS p (namespace, provider, external_id, customer_id, amount, amount_refunded, currency, status, version)
		SELECT k.namespace, k.provider, k.external_id, `+ledger.RedactErasedSQL("k.namespace", "k.customer_id")+`,
			k.amount, k.amount_refunded, k.currency, k.status, k.version
		FROM `+from+`
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
		RETURNING p.namespace, p.provider, p.external_id, (xmax = 0)`, args...)
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
		if err := rows.Scan(&k.Namespace, &k.Provider, &k.ExternalID, &created); err != nil {
			return fmt.Errorf("merge %d payment(s): %w", n, err)
		}
		if created {
			receipts = append(receipts, river.InsertManyParams{Args: ReceiptArgs{PaymentID: k.ExternalID, Provider: k.Provider, Namespace: k.Namespace}})
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("merge %d payment(s): %w", n, err)
	}
	return tx.InsertJobs(ctx, receipts)
}

// record stages p's merge into the payment row of provider's external id
// in the event's namespace; the row, and the one receipt of a payment when
// its row is created, are written once for the batch (flushPayments).
func (m *module) record(tx *ledger.Tx, ev *ledger.Event, provider, externalID string, p Payment) {
	m.payments.Put(tx, payKey{Namespace: ev.Namespace, Provider: provider, ExternalID: externalID}, p)
}

// stripeObject is the part of the Stripe events handled here that is
// used: the event's created and fields of its data.object.
type stripeObject struct {
	Created        int64                 `field:"created"`
	ID             string                `field:"data.object.id,required"`
	Amount         int64                 `field:"data.object.amount"`
	AmountReceived int64                 `field:"data.object.amount_received"`
	AmountRefunded int64                 `field:"data.object.amount_refunded"`
	AmountPaid     int64                 `field:"data.object.amount_paid"`
	Currency       string                `field:"data.object.currency"`
	Customer       provider.ExpandableID `field:"data.object.customer"`
	PaymentIntent  provider.ExpandableID `field:"data.object.payment_intent"`
}

func (m *module) stripePaymentIntent(_ context.Context, tx *ledger.Tx, ev *ledger.Event, pi stripeObject) error {
	amount := pi.AmountReceived
	if amount == 0 {
		amount = pi.Amount
	}
	m.record(tx, ev, "stripe", pi.ID, Payment{
		CustomerID: string(pi.Customer), Amount: amount, Currency: pi.Currency, Version: pi.Created,
	})
	return nil
}

// stripeChargeRefunded applies a refund to the charge's PaymentIntent; the
// charge's amount_refunded is cumulative. A charge without a PaymentIntent
// is its own payment.
func (m *module) stripeChargeRefunded(_ context.Context, tx *ledger.Tx, ev *ledger.Event, ch stripeObject) error {
	id := string(ch.PaymentIntent)
	if id == "" {
		id = ch.ID
	}
	m.record(tx, ev, "stripe", id, Payment{
		CustomerID: string(ch.Customer), Amount: ch.Amount, AmountRefunded: ch.AmountRefunded, Currency: ch.Currency, Version: ch.Created,
	})
	return nil
}

// stripeInvoice is the part of an invoice.paid used: the object's fields
// and its payments list.
type stripeInvoice struct {
	stripeObject
	Payments []invoicePayment `field:"data.object.payments.data"`
}

// invoicePayment is the part of an invoice's payment used.
type invoicePayment struct {
	PaymentIntent provider.ExpandableID `field:"payment.payment_intent"`
}

// stripeInvoicePaid adds to the invoice's PaymentIntent, never a payment of
// its own.
func (m *module) stripeInvoicePaid(_ context.Context, tx *ledger.Tx, ev *ledger.Event, inv stripeInvoice) error {
	pi := string(inv.PaymentIntent)
	for _, p := range inv.Payments {
		if pi == "" {
			pi = string(p.PaymentIntent)
		}
	}
	if pi == "" {
		return nil // paid without a PaymentIntent (credit, out of band): nothing to record
	}
	m.record(tx, ev, "stripe", pi, Payment{
		CustomerID: string(inv.Customer), Amount: inv.AmountPaid, Currency: inv.Currency, Version: inv.Created,
	})
	return nil
}

// paddleTransaction is the part of a Paddle transaction.completed used.
type paddleTransaction struct {
	OccurredAt time.Time `field:"occurred_at"`
	ID         string    `field:"data.id,required"`
	CustomerID string    `field:"data.customer_id"`
	Currency   string    `field:"data.currency_code"`
	GrandTotal string    `field:"data.details.totals.grand_total"`
}

func (m *module) paddleTransaction(_ context.Context, tx *ledger.Tx, ev *ledger.Event, t paddleTransaction) error {
	amount, err := strconv.ParseInt(t.GrandTotal, 10, 64)
	if err != nil {
		return ledger.Permanent(fmt.Errorf("transaction %s grand_total %q: %w", t.ID, t.GrandTotal, err))
	}
	m.record(tx, ev, "paddle", t.ID, Payment{
		CustomerID: t.CustomerID, Amount: amount, Currency: t.Currency, Version: t.OccurredAt.UnixMicro(),
	})
	return nil
}
