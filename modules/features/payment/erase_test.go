package payment_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// customerPayment is a payment_intent.succeeded of customer.
func customerPayment(id, pi, customer string, amount int64) stripeEvent {
	return stripeEvent{id, "payment_intent.succeeded", []byte(fmt.Sprintf(
		`{"id":%q,"type":"payment_intent.succeeded","created":100,"data":{"object":{"id":%q,"object":"payment_intent","amount":%d,"amount_received":%d,"currency":"eur","customer":%q}}}`,
		id, pi, amount, amount, customer))}
}

// TestEraseRedactsTheCustomerAndKeepsThePayment: erase redacts the
// customer of the subject's payments and keeps their amounts, so a late
// refund still merges into the row, never fills the customer in again and
// never makes a second receipt; a redelivery of the erased event is a
// duplicate; another customer's payment is untouched; a dry run counts
// the same rows and changes nothing.
func TestEraseRedactsTheCustomerAndKeepsThePayment(t *testing.T) {
	t.Parallel()
	h, _ := setup(t, 0, nil)
	paid := customerPayment("evt_er_pa", "pi_er_a", "cus_A", 1000)
	deliver(t, h, paid)
	deliver(t, h, customerPayment("evt_er_pb", "pi_er_b", "cus_B", 500))
	holding := func(customer string) int {
		return h.DB.Count(t, `SELECT count(*) FROM payment p WHERE strpos(row_to_json(p)::text, $1) > 0`, customer)
	}
	require.Equal(t, 1, holding("cus_A"))

	h.Erase(t, "cus_A", "payment", 1, func() int { return holding("cus_A") })
	require.Equal(t, ledger.Erased, paymentRow(t, h, "stripe", "pi_er_a").CustomerID)
	require.Equal(t, "cus_B", paymentRow(t, h, "stripe", "pi_er_b").CustomerID)

	require.False(t, h.Claim(t, "stripe", paid.id, paid.typ, paid.body), "a redelivery is a duplicate")
	require.NoError(t, h.Apply(t, "stripe", paid.id, false))
	deliver(t, h, stripeEvent{"evt_er_refund", "charge.refunded", []byte(`{"id":"evt_er_refund","type":"charge.refunded","created":200,` +
		`"data":{"object":{"id":"ch_er","object":"charge","payment_intent":"pi_er_a","amount":1000,"amount_refunded":400,"currency":"eur","customer":"cus_A"}}}`)})
	require.Zero(t, holding("cus_A"), "a late refund does not fill the customer in again")
	p := paymentRow(t, h, "stripe", "pi_er_a")
	require.Equal(t, int64(400), p.AmountRefunded, "the refund still merges")
	require.Equal(t, 2, receiptJobs(t, h), "one receipt per payment, none again")
}

// TestErasedCustomerIsNotWrittenIntoANewPayment: a payment of a customer
// erased before it arrived (a late event of an older payment, a replay)
// is written with the customer redacted.
func TestErasedCustomerIsNotWrittenIntoANewPayment(t *testing.T) {
	t.Parallel()
	h, _ := setup(t, 0, nil)
	deliver(t, h, customerPayment("evt_er_first", "pi_er_first", "cus_Gone", 700))
	h.Erase(t, "cus_Gone", "payment", 1, func() int {
		return h.DB.Count(t, `SELECT count(*) FROM payment WHERE customer_id = 'cus_Gone'`)
	})
	deliver(t, h, customerPayment("evt_er_late", "pi_er_late", "cus_Gone", 300))
	require.Equal(t, ledger.Erased, paymentRow(t, h, "stripe", "pi_er_late").CustomerID)
	require.Equal(t, int64(300), paymentRow(t, h, "stripe", "pi_er_late").Amount, "the payment itself is kept")
}
