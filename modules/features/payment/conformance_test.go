package payment_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/features/payment"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// pay is a payment row as the tests expect it.
type pay struct {
	Customer, Currency string
	Amount, Refunded   int64
}

// TestConformance runs the ledger's suite on the payment events of the
// corpus (Stripe's and Paddle's official examples) and on a payment with
// refunds and its invoice: payment and refund events give the same row in
// any order, amounts only grow, and each payment gets one receipt.
func TestConformance(t *testing.T) {
	t.Parallel()
	corpus := ledgertest.Corpus(t, func(p, typ string) bool {
		return p == "stripe" && (typ == "payment_intent.succeeded" || typ == "charge.refunded" || typ == "invoice.paid") ||
			p == "paddle" && typ == "transaction.completed"
	})
	events := ledgertest.Events(corpus)
	for _, e := range []stripeEvent{
		piSucceeded("evt_conf_pi", "pi_conf", 1000),
		chargeRefunded("evt_conf_r1", "pi_conf", 1000, 300),
		chargeRefunded("evt_conf_r2", "pi_conf", 1000, 1000),
		invoicePaid("evt_conf_inv", "pi_conf", 1000),
		chargeRefunded("evt_conf_r3", "pi_conf2", 700, 100),
		piSucceeded("evt_conf_pi2", "pi_conf2", 700),
		{"evt_conf_inv2", "invoice.paid", []byte(`{"id":"evt_conf_inv2","type":"invoice.paid","created":160,"data":{"object":{"id":"in_conf2",` +
			`"object":"invoice","amount_paid":900,"currency":"eur","customer":"cus_1","payment_intent":null,` +
			`"payments":{"data":[{"payment":{"type":"payment_intent","payment_intent":{"id":"pi_conf3","object":"payment_intent"}}}]}}}}`)},
	} {
		events = append(events, ledgertest.Event{Provider: "stripe", ID: e.id, Type: e.typ, Payload: e.body})
	}
	want := paymentsOf(t, events)
	require.Equal(t, pay{"cus_1", "eur", 1000, 1000}, want["stripe/pi_conf"])
	require.Equal(t, pay{"cus_1", "eur", 900, 0}, want["stripe/pi_conf3"], "the invoice's payments list names its PaymentIntent")

	ledgertest.Conformance(t, ledgertest.Module{
		Register: func(h *ledgertest.Harness) {
			payment.Register(h.Registry, payment.Config{DB: h.DB.SQL, Sender: &recorder{}})
		},
		Events: events,
		Check: func(t testing.TB, h *ledgertest.Harness) {
			require.Equal(t, len(want), h.DB.Count(t, `SELECT count(*) FROM payment`))
			for key, w := range want {
				prov, id, _ := strings.Cut(key, "/")
				var (
					got    pay
					status string
				)
				require.NoError(t, h.DB.SQL.QueryRow(`SELECT customer_id, currency, amount, amount_refunded, status FROM payment
					WHERE namespace = $1 AND provider = $1 AND external_id = $2`, prov, id).
					Scan(&got.Customer, &got.Currency, &got.Amount, &got.Refunded, &status), key)
				require.Equal(t, w, got, key)
				wantStatus := "succeeded"
				switch {
				case w.Refunded >= w.Amount && w.Refunded > 0:
					wantStatus = "refunded"
				case w.Refunded > 0:
					wantStatus = "partially_refunded"
				}
				require.Equal(t, wantStatus, status, key)
			}
			require.Equal(t, len(want), h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'payment_receipt'`), "one receipt per payment")
			require.Equal(t, len(want), h.DB.Count(t, `SELECT count(DISTINCT args->>'payment_id') FROM river_job WHERE kind = 'payment_receipt'`))
		},
		State: `SELECT namespace, provider, external_id, customer_id, amount, amount_refunded, currency, status, version FROM payment`,
	})
}

// paymentsOf is what each payment's row holds once all of events are
// merged: per payment, the largest amounts, and the first customer and
// currency an event names.
func paymentsOf(t *testing.T, events []ledgertest.Event) map[string]pay {
	t.Helper()
	want := map[string]pay{}
	add := func(key string, p pay) {
		old, ok := want[key]
		if ok {
			p.Amount, p.Refunded = max(p.Amount, old.Amount), max(p.Refunded, old.Refunded)
			if old.Customer != "" {
				p.Customer = old.Customer
			}
			if old.Currency != "" {
				p.Currency = old.Currency
			}
		}
		want[key] = p
	}
	for _, ev := range events {
		if ev.Provider == "paddle" {
			var tx struct {
				Data struct {
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
			require.NoError(t, json.Unmarshal(ev.Payload, &tx), ev.ID)
			var amount int64
			_, err := fmt.Sscan(tx.Data.Details.Totals.GrandTotal, &amount)
			require.NoError(t, err, ev.ID)
			add("paddle/"+tx.Data.ID, pay{Customer: tx.Data.CustomerID, Currency: tx.Data.CurrencyCode, Amount: amount})
			continue
		}
		var se struct {
			Data struct {
				Object struct {
					ID             string          `json:"id"`
					Customer       json.RawMessage `json:"customer"`
					PaymentIntent  json.RawMessage `json:"payment_intent"`
					Amount         int64           `json:"amount"`
					AmountReceived int64           `json:"amount_received"`
					AmountRefunded int64           `json:"amount_refunded"`
					AmountPaid     int64           `json:"amount_paid"`
					Currency       string          `json:"currency"`
					Payments       struct {
						Data []struct {
							Payment struct {
								PaymentIntent json.RawMessage `json:"payment_intent"`
							} `json:"payment"`
						} `json:"data"`
					} `json:"payments"`
				} `json:"object"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(ev.Payload, &se), ev.ID)
		o := se.Data.Object
		customer, pi := provider.StripeID(o.Customer), provider.StripeID(o.PaymentIntent)
		switch ev.Type {
		case "payment_intent.succeeded":
			amount := o.AmountReceived
			if amount == 0 {
				amount = o.Amount
			}
			add("stripe/"+o.ID, pay{Customer: customer, Currency: o.Currency, Amount: amount})
		case "charge.refunded":
			if pi == "" {
				pi = o.ID
			}
			add("stripe/"+pi, pay{Customer: customer, Currency: o.Currency, Amount: o.Amount, Refunded: o.AmountRefunded})
		case "invoice.paid":
			for _, p := range o.Payments.Data {
				if pi == "" {
					pi = provider.StripeID(p.Payment.PaymentIntent)
				}
			}
			if pi != "" {
				add("stripe/"+pi, pay{Customer: customer, Currency: o.Currency, Amount: o.AmountPaid})
			}
		}
	}
	return want
}
