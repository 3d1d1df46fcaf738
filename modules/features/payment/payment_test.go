package payment_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/ent"
	entpayment "github.com/hookledger/hookledger/ent/payment"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/features/payment"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// recorder is a receipt sender that remembers what it was asked to send.
type recorder struct {
	mu   sync.Mutex
	keys []string
}

func (r *recorder) SendReceipt(_ context.Context, rc payment.Receipt) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, rc.IdempotencyKey)
	return nil
}

func (r *recorder) sent() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

func setup(t *testing.T, workers int, extra func(*ledger.Registry)) (*ledgertest.Harness, *recorder) {
	t.Helper()
	rec := &recorder{}
	h := ledgertest.New(t, workers, func(h *ledgertest.Harness) {
		payment.Register(h.Registry, payment.Config{DB: h.DB.SQL, Sender: rec})
		if extra != nil {
			extra(h.Registry)
		}
	})
	return h, rec
}

type stripeEvent struct {
	id, typ string
	body    []byte
}

func piSucceeded(id, pi string, amount int64) stripeEvent {
	return stripeEvent{id, "payment_intent.succeeded", []byte(fmt.Sprintf(
		`{"id":%q,"type":"payment_intent.succeeded","created":100,"data":{"object":{"id":%q,"object":"payment_intent","amount":%d,"amount_received":%d,"currency":"eur","customer":"cus_1"}}}`,
		id, pi, amount, amount))}
}

func chargeRefunded(id, pi string, amount, refunded int64) stripeEvent {
	return stripeEvent{id, "charge.refunded", []byte(fmt.Sprintf(
		`{"id":%q,"type":"charge.refunded","created":200,"data":{"object":{"id":"ch_%s","object":"charge","payment_intent":%q,"amount":%d,"amount_refunded":%d,"currency":"eur","customer":{"id":"cus_1","object":"customer"}}}}`,
		id, id, pi, amount, refunded))}
}

func invoicePaid(id, pi string, amount int64) stripeEvent {
	piJSON := "null"
	if pi != "" {
		piJSON = fmt.Sprintf("%q", pi)
	}
	return stripeEvent{id, "invoice.paid", []byte(fmt.Sprintf(
		`{"id":%q,"type":"invoice.paid","created":150,"data":{"object":{"id":"in_%s","object":"invoice","amount_paid":%d,"currency":"eur","customer":"cus_1","payment_intent":%s}}}`,
		id, id, amount, piJSON))}
}

func deliver(t *testing.T, h *ledgertest.Harness, e stripeEvent) {
	t.Helper()
	require.NoError(t, h.Deliver(t, "stripe", e.id, e.typ, e.body))
}

func paymentRow(t *testing.T, h *ledgertest.Harness, provider, id string) *ent.Payment {
	t.Helper()
	p, err := h.DB.Ent().Payment.Query().Where(entpayment.Provider(provider), entpayment.ExternalID(id)).Only(context.Background())
	require.NoError(t, err)
	return p
}

func receiptJobs(t *testing.T, h *ledgertest.Harness) int {
	return h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'payment_receipt'`)
}

func TestPaymentIntentFixture(t *testing.T) {
	t.Parallel()
	h, _ := setup(t, 0, nil)
	body, err := os.ReadFile("../../../testdata/providers/stripe/payment_intent.succeeded.json")
	require.NoError(t, err)
	require.NoError(t, h.Deliver(t, "stripe", "evt_composed_pi_succeeded_0005", "payment_intent.succeeded", body))
	require.NoError(t, h.Deliver(t, "stripe", "evt_composed_pi_succeeded_0005", "payment_intent.succeeded", body))
	p := paymentRow(t, h, "stripe", "pi_1PgafyB7WZ01zgkWSjxsAJo3")
	require.Equal(t, int64(1099), p.Amount)
	require.Equal(t, "usd", p.Currency)
	require.Equal(t, entpayment.StatusSucceeded, p.Status)
	require.Equal(t, 1, receiptJobs(t, h))
}

// TestAnyOrderSameRow applies a payment, two refunds and the invoice in
// every order: the row and the single receipt job come out the same.
func TestAnyOrderSameRow(t *testing.T) {
	t.Parallel()
	events := []stripeEvent{
		piSucceeded("evt_pi", "pi_A", 1000),
		chargeRefunded("evt_r1", "pi_A", 1000, 300),
		chargeRefunded("evt_r2", "pi_A", 1000, 1000),
		invoicePaid("evt_inv", "pi_A", 1000),
	}
	for _, order := range permutations(len(events)) {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			t.Parallel()
			h, _ := setup(t, 0, nil)
			for _, i := range order {
				deliver(t, h, events[i])
			}
			p := paymentRow(t, h, "stripe", "pi_A")
			require.Equal(t, int64(1000), p.Amount)
			require.Equal(t, int64(1000), p.AmountRefunded)
			require.Equal(t, entpayment.StatusRefunded, p.Status)
			require.Equal(t, "cus_1", p.CustomerID)
			require.Equal(t, int64(200), p.Version)
			require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM payment`), "invoice.paid never creates a second payment")
			require.Equal(t, 1, receiptJobs(t, h))
		})
	}
}

func TestRefundFirstCreatesFromCharge(t *testing.T) {
	t.Parallel()
	h, _ := setup(t, 0, nil)
	deliver(t, h, chargeRefunded("evt_r1", "pi_B", 2000, 500))
	p := paymentRow(t, h, "stripe", "pi_B")
	require.Equal(t, int64(2000), p.Amount)
	require.Equal(t, int64(500), p.AmountRefunded)
	require.Equal(t, entpayment.StatusPartiallyRefunded, p.Status)
	require.Equal(t, 1, receiptJobs(t, h))

	deliver(t, h, piSucceeded("evt_pi", "pi_B", 2000))
	require.Equal(t, entpayment.StatusPartiallyRefunded, paymentRow(t, h, "stripe", "pi_B").Status)
	require.Equal(t, 1, receiptJobs(t, h), "the payment already existed: no second receipt")

	// The same refund applied again on purpose (requeue --force) changes nothing.
	require.NoError(t, h.Apply(t, "stripe", "evt_r1", true))
	require.Equal(t, int64(500), paymentRow(t, h, "stripe", "pi_B").AmountRefunded, "a refund is never applied twice")
}

func TestInvoiceWithoutPaymentIntentRecordsNothing(t *testing.T) {
	t.Parallel()
	h, _ := setup(t, 0, nil)
	body, err := os.ReadFile("../../../testdata/providers/stripe/invoice.paid.json")
	require.NoError(t, err)
	require.NoError(t, h.Deliver(t, "stripe", "evt_composed_invoice_paid_0004", "invoice.paid", body))
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM payment`))
	require.Equal(t, "settled", h.Row(t, "stripe", "evt_composed_invoice_paid_0004").Status)
}

func TestPaddleTransaction(t *testing.T) {
	t.Parallel()
	h, _ := setup(t, 0, nil)
	body := []byte(`{"event_id":"evt_p1","event_type":"transaction.completed","occurred_at":"2024-04-12T13:16:10.444253Z","data":{"id":"txn_01","status":"completed","customer_id":"ctm_01","currency_code":"GBP","details":{"totals":{"grand_total":"2599"}}}}`)
	require.NoError(t, h.Deliver(t, "paddle", "evt_p1", "transaction.completed", body))
	p := paymentRow(t, h, "paddle", "txn_01")
	require.Equal(t, int64(2599), p.Amount)
	require.Equal(t, "GBP", p.Currency)
	require.Equal(t, int64(1712927770444253), p.Version)
	require.Equal(t, 1, receiptJobs(t, h))
}

// TestReceiptOnceUnderRetriesAndDuplicates runs real workers: a handler
// after the payment's fails on the first attempt, rolling back the payment
// and its receipt job; duplicates arrive meanwhile. The receipt is sent
// once, keyed by the payment id.
func TestReceiptOnceUnderRetriesAndDuplicates(t *testing.T) {
	t.Parallel()
	var failures atomic.Int32
	h, rec := setup(t, 4, func(reg *ledger.Registry) {
		reg.Handle("stripe", "payment_intent.succeeded", func(context.Context, *ledger.Tx, *ledger.Event) error {
			if failures.Add(1) == 1 {
				return errors.New("downstream unavailable")
			}
			return nil
		})
	})
	e := piSucceeded("evt_once", "pi_once", 4200)
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.Claim(t, "stripe", e.id, e.typ, e.body)
		}()
	}
	wg.Wait()
	h.WaitSettled(t, "stripe", "evt_once")
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'payment_receipt' AND state = 'completed'`) == 1
	})
	require.Equal(t, []string{"pi_once"}, rec.sent())
	require.Equal(t, 1, receiptJobs(t, h))
	require.Equal(t, 2, h.Row(t, "stripe", "evt_once").Attempts)
}

func permutations(n int) [][]int {
	if n == 1 {
		return [][]int{{0}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// TestBatchReceiptsOncePerPayment: the receipts of a batch are inserted
// together, still one per payment the batch created, and none for a
// payment it only merged into. When the batch fails (a poison event), the
// receipts go with its rollback, and the split events' own jobs insert
// each one once.
func TestBatchReceiptsOncePerPayment(t *testing.T) {
	t.Parallel()
	for _, poison := range []bool{false, true} {
		t.Run(fmt.Sprintf("poison=%t", poison), func(t *testing.T) {
			t.Parallel()
			h, rec := setup(t, 2, nil)
			deliver(t, h, piSucceeded("evt_before", "pi_0", 500))
			events := []stripeEvent{
				piSucceeded("evt_a", "pi_A", 1000),
				chargeRefunded("evt_b", "pi_B", 700, 100), // creates pi_B from the charge
				piSucceeded("evt_c", "pi_B", 700),
				chargeRefunded("evt_d", "pi_0", 500, 500), // merges into a stored payment
			}
			if poison {
				events = append(events, stripeEvent{"evt_poison", "payment_intent.succeeded", []byte(`{"id":"evt_poison","type":"payment_intent.succeeded","data":{"object":{}}}`)})
			}
			batch := make([]ledgertest.BatchEvent, len(events))
			for i, e := range events {
				batch[i] = ledgertest.BatchEvent{ID: e.id, Type: e.typ, Payload: e.body}
			}
			h.InsertBatch(t, "stripe", batch...)
			for _, e := range events[:4] {
				h.WaitSettled(t, "stripe", e.id)
			}
			require.Equal(t, 3, receiptJobs(t, h), "one receipt per payment: pi_0, pi_A, pi_B")
			require.Equal(t, 3, h.DB.Count(t, `SELECT count(DISTINCT args->>'payment_id') FROM river_job WHERE kind = 'payment_receipt'`))
			dbtest.Eventually(t, func() bool { return len(rec.sent()) >= 3 })
			require.ElementsMatch(t, []string{"pi_0", "pi_A", "pi_B"}, rec.sent())
			require.Equal(t, entpayment.StatusRefunded, paymentRow(t, h, "stripe", "pi_0").Status)
		})
	}
}

// TestBatchMergesAsOneByOne: a batch that holds several events of one
// payment and an event of another that is already stored leaves the rows
// and the receipts that applying its events one by one leaves. A batch
// applies in key order, and these ids put the full refund before the
// partial one and both before the payment itself.
func TestBatchMergesAsOneByOne(t *testing.T) {
	t.Parallel()
	events := []stripeEvent{
		chargeRefunded("evt_1_r2", "pi_A", 1000, 1000),
		chargeRefunded("evt_2_r1", "pi_A", 1000, 300),
		piSucceeded("evt_3_pi", "pi_A", 1000),
		invoicePaid("evt_4_inv", "pi_A", 1000),
		chargeRefunded("evt_5_s1", "pi_S", 800, 200), // pi_S is stored before the batch
	}
	type row struct {
		Amount, Refunded, Version  int64
		Status, Customer, Currency string
	}
	rows := func(h *ledgertest.Harness) map[string]row {
		out := map[string]row{}
		for _, id := range []string{"pi_A", "pi_S"} {
			p := paymentRow(t, h, "stripe", id)
			out[id] = row{p.Amount, p.AmountRefunded, p.Version, string(p.Status), p.CustomerID, p.Currency}
		}
		return out
	}
	alone, _ := setup(t, 0, nil)
	deliver(t, alone, piSucceeded("evt_0_s0", "pi_S", 800))
	for _, e := range events {
		deliver(t, alone, e)
	}
	want := rows(alone)
	require.Equal(t, row{1000, 1000, 200, "refunded", "cus_1", "eur"}, want["pi_A"])
	require.Equal(t, 2, receiptJobs(t, alone))

	h, _ := setup(t, 2, nil)
	deliver(t, h, piSucceeded("evt_0_s0", "pi_S", 800))
	batch := make([]ledgertest.BatchEvent, len(events))
	for i, e := range events {
		batch[i] = ledgertest.BatchEvent{ID: e.id, Type: e.typ, Payload: e.body}
	}
	h.InsertBatch(t, "stripe", batch...)
	for _, e := range events {
		h.WaitSettled(t, "stripe", e.id)
	}
	require.Equal(t, want, rows(h))
	require.Equal(t, 2, receiptJobs(t, h), "one receipt per payment")
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event' AND args->>'event_id' <> 'evt_0_s0'`),
		"applied as one batch, never split")
}
