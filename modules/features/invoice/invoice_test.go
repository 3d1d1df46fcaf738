package invoice_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/features/invoice"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// row is an invoice row as the tests read it.
type row struct {
	Customer, Status, Currency string
	Due, Paid, Version         int64
}

func read(t testing.TB, h *ledgertest.Harness, namespace, id string) row {
	t.Helper()
	var r row
	require.NoError(t, h.DB.SQL.QueryRow(`SELECT customer_id, status, currency, amount_due, amount_paid, version FROM invoice
		WHERE namespace = $1 AND provider = 'stripe' AND external_id = $2`, namespace, id).
		Scan(&r.Customer, &r.Status, &r.Currency, &r.Due, &r.Paid, &r.Version), id)
	return r
}

// event is a Stripe invoice event of invoice id, as Stripe sends one.
func event(eventID, typ, id, customer, status string, due, paid, created int64) ledgertest.Event {
	return ledgertest.Event{Provider: "stripe", ID: eventID, Type: typ, Payload: []byte(fmt.Sprintf(
		`{"id":%q,"object":"event","type":%q,"created":%d,"data":{"object":{"id":%q,"object":"invoice","customer":%q,`+
			`"status":%q,"amount_due":%d,"amount_paid":%d,"amount_remaining":%d,"currency":"eur"}}}`,
		eventID, typ, created, id, customer, status, due, paid, due-paid))}
}

// samples are the module's samples (official Stripe invoice payloads, one
// per type, sources in samples/SOURCES.md): one invoice, each type's
// event at its own time.
func samples(t testing.TB) []ledgertest.Event {
	t.Helper()
	files, err := fs.Glob(invoice.Samples(), "stripe/*.json")
	require.NoError(t, err)
	require.Len(t, files, len(invoice.Types), "a sample of each type")
	var out []ledgertest.Event
	for _, f := range files {
		body, err := fs.ReadFile(invoice.Samples(), f)
		require.NoError(t, err)
		var head struct{ ID, Type string }
		require.NoError(t, json.Unmarshal(body, &head))
		require.Equal(t, strings.TrimSuffix(strings.TrimPrefix(f, "stripe/"), ".json"), head.Type)
		out = append(out, ledgertest.Event{Provider: "stripe", ID: head.ID, Type: head.Type, Payload: body})
	}
	return out
}

// TestConformance: whatever the order, the batching, the duplicates, the
// forced re-applies or the concurrency, each invoice ends in the state of
// its newest event: the official samples' invoice in its newest (voided),
// a paid invoice whose older finalized event comes late stays paid, and
// events of one second end in the status that comes last in an invoice's
// life.
func TestConformance(t *testing.T) {
	t.Parallel()
	events := append(samples(t),
		event("evt_inv_paid", "invoice.paid", "in_paid", "cus_1", "paid", 5000, 5000, 300),
		event("evt_inv_final", "invoice.finalized", "in_paid", "cus_1", "open", 5000, 0, 200),
		event("evt_inv_created", "invoice.created", "in_paid", "cus_1", "draft", 5000, 0, 100),
		event("evt_tie_open", "invoice.finalized", "in_tie", "cus_2", "open", 700, 0, 400),
		event("evt_tie_void", "invoice.voided", "in_tie", "cus_2", "void", 700, 0, 400),
		event("evt_tie_failed", "invoice.payment_failed", "in_tie", "cus_2", "open", 700, 0, 400),
	)
	ledgertest.Conformance(t, ledgertest.Module{
		Register: func(h *ledgertest.Harness) { invoice.Register(h.Registry) },
		Events:   events,
		Check: func(t testing.TB, h *ledgertest.Harness) {
			require.Equal(t, 3, h.DB.Count(t, `SELECT count(*) FROM invoice`), "one row per invoice")
			require.Equal(t, row{"cus_1", "paid", "eur", 5000, 5000, 300}, read(t, h, "stripe", "in_paid"))
			require.Equal(t, row{"cus_2", "void", "eur", 700, 0, 400}, read(t, h, "stripe", "in_tie"))
			sample := read(t, h, "stripe", "in_1Pgc6tB7WZ01zgkWu9fdqL6I")
			require.Equal(t, "void", sample.Status, "the newest sample is invoice.voided")
			require.Equal(t, row{"cus_QXg1o8vcGmoR32", "void", "usd", 1000, 0, sample.Version}, sample)
		},
		State: `SELECT namespace, provider, external_id, customer_id, status, amount_due, amount_paid, currency, version, event_id FROM invoice`,
	})
}

// TestPaidThenOlderFinalizedStaysPaid: invoice.paid, then an older
// invoice.finalized delivered late, leaves the invoice paid with its
// amounts and customer; a newer event moves it on.
func TestPaidThenOlderFinalizedStaysPaid(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) { invoice.Register(h.Registry) })
	for _, e := range []ledgertest.Event{
		event("evt_p", "invoice.paid", "in_1", "cus_A", "paid", 1200, 1200, 2000),
		event("evt_f", "invoice.finalized", "in_1", "cus_A", "open", 1200, 0, 1000),
	} {
		require.NoError(t, h.Deliver(t, e.Provider, e.ID, e.Type, e.Payload))
	}
	require.Equal(t, row{"cus_A", "paid", "eur", 1200, 1200, 2000}, read(t, h, "stripe", "in_1"))
	e := event("evt_u", "invoice.marked_uncollectible", "in_1", "cus_A", "uncollectible", 1200, 1200, 3000)
	require.NoError(t, h.Deliver(t, e.Provider, e.ID, e.Type, e.Payload))
	require.Equal(t, "uncollectible", read(t, h, "stripe", "in_1").Status)
}

// TestPoisonFailsForGood: an event whose object is not an invoice, or
// whose amount is not a number, is no retry's to fix.
func TestPoisonFailsForGood(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) { invoice.Register(h.Registry) })
	for i, body := range []string{
		`{"id":"evt_bad0","type":"invoice.paid","created":1,"data":{"object":{}}}`,
		`{"id":"evt_bad1","type":"invoice.paid","created":1,"data":{"object":{"id":"in_1","amount_due":"12"}}}`,
	} {
		err := h.Deliver(t, "stripe", fmt.Sprintf("evt_bad%d", i), "invoice.paid", []byte(body))
		require.Error(t, err)
		require.True(t, ledger.IsPermanent(err), "%v", err)
	}
}

// TestNamespacesKeepTheirOwnInvoices: the same invoice id from a second
// source (its own namespace) is a row of its own.
func TestNamespacesKeepTheirOwnInvoices(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) { invoice.Register(h.Registry) })
	a := event("evt_ns", "invoice.paid", "in_ns", "cus_A", "paid", 10, 10, 50)
	require.NoError(t, h.Deliver(t, a.Provider, a.ID, a.Type, a.Payload))
	b := event("evt_ns", "invoice.voided", "in_ns", "cus_B", "void", 20, 0, 10)
	res, err := h.Claimer.Claim(context.Background(), ledger.Claim{
		Namespace: "stripe-eu", EventID: b.ID, Provider: "stripe", Source: "stripe-eu", Type: b.Type, Payload: b.Payload,
	})
	require.NoError(t, err)
	require.Equal(t, ledger.Claimed, res)
	require.NoError(t, h.Apply(t, "stripe-eu", b.ID, false))
	require.Equal(t, "paid", read(t, h, "stripe", "in_ns").Status)
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM invoice WHERE namespace = 'stripe-eu' AND status = 'void' AND customer_id = 'cus_B'`))
}

// TestEraseRedactsTheCustomerAndKeepsTheInvoice: erase redacts the
// subject's invoices and keeps their state, so an older event delivered
// later changes nothing and a newer one writes the customer redacted;
// another customer's invoice is untouched.
func TestEraseRedactsTheCustomerAndKeepsTheInvoice(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) { invoice.Register(h.Registry) })
	for _, e := range []ledgertest.Event{
		event("evt_ea", "invoice.finalized", "in_a", "cus_A", "open", 900, 0, 100),
		event("evt_eb", "invoice.finalized", "in_b", "cus_B", "open", 300, 0, 100),
	} {
		require.NoError(t, h.Deliver(t, e.Provider, e.ID, e.Type, e.Payload))
	}
	holding := func() int {
		return h.DB.Count(t, `SELECT count(*) FROM invoice i WHERE strpos(row_to_json(i)::text, 'cus_A') > 0`)
	}
	h.Erase(t, "cus_A", "invoice", 1, holding)
	require.Equal(t, row{ledger.Erased, "open", "eur", 900, 0, 100}, read(t, h, "stripe", "in_a"))
	require.Equal(t, "cus_B", read(t, h, "stripe", "in_b").Customer)

	for _, e := range []ledgertest.Event{
		event("evt_ea_old", "invoice.created", "in_a", "cus_A", "draft", 900, 0, 50),
		event("evt_ea_new", "invoice.paid", "in_a", "cus_A", "paid", 900, 900, 200),
	} {
		require.NoError(t, h.Deliver(t, e.Provider, e.ID, e.Type, e.Payload))
	}
	require.Zero(t, holding(), "no later event writes the customer back")
	require.Equal(t, row{ledger.Erased, "paid", "eur", 900, 900, 200}, read(t, h, "stripe", "in_a"))
}
