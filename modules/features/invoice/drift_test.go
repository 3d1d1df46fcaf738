package invoice_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/drift"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/features/invoice"
	"github.com/hookledger/hookledger/modules/testsupport/drifttest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
	"github.com/hookledger/hookledger/modules/testsupport/stripemock"
)

// driftStripe serves Stripe's invoice list and retrieve over a fixed set
// of invoices (404 for an unknown id), each the official sample's invoice
// with its own id, customer, status and amounts.
type driftStripe struct {
	mu       sync.Mutex
	invoices map[string]map[string]any
	fetched  []string
}

func newDriftStripe(t *testing.T) (*driftStripe, provider.StripeAPI) {
	f := &driftStripe{invoices: map[string]map[string]any{}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	return f, provider.StripeAPI{Base: srv.URL, Key: "sk_test_drift", HTTP: srv.Client()}
}

func (f *driftStripe) add(t *testing.T, id, customer, status string, due, paid int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.invoices[id] = sampleInvoice(t, id, customer, status, due, paid)
}

func (f *driftStripe) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer sk_test_drift" {
		http.Error(w, `{"error":{"message":"Invalid API Key"}}`, http.StatusUnauthorized)
		return
	}
	if id, ok := strings.CutPrefix(r.URL.Path, "/v1/invoices/"); ok {
		f.fetched = append(f.fetched, id)
		if in, ok := f.invoices[id]; ok {
			_ = json.NewEncoder(w).Encode(in)
			return
		}
		stripemock.Missing(w)
		return
	}
	if r.URL.Path != "/v1/invoices" {
		http.NotFound(w, r)
		return
	}
	stripemock.List(w, r.URL.Query(), f.invoices)
}

// sampleInvoice is the invoice of the module's official invoice.finalized
// sample with the given id, customer, status and amounts.
func sampleInvoice(t *testing.T, id, customer, status string, due, paid int64) map[string]any {
	body, err := fs.ReadFile(invoice.Samples(), "stripe/invoice.finalized.json")
	require.NoError(t, err)
	var ev struct {
		Data struct {
			Object map[string]any `json:"object"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &ev))
	in := ev.Data.Object
	in["id"], in["customer"], in["status"] = id, customer, status
	in["amount_due"], in["amount_paid"], in["amount_remaining"] = due, paid, due-paid
	in["created"] = time.Now().Add(-24 * time.Hour).Unix()
	return in
}

// driftSettle delivers an invoice event of the sample's invoice and waits
// for the workers to apply it.
func driftSettle(t *testing.T, h *ledgertest.Harness, typ string, created int64, in map[string]any) {
	t.Helper()
	id := fmt.Sprintf("evt_%s_%d_%s", in["id"], created, in["status"])
	body, err := json.Marshal(map[string]any{"id": id, "object": "event", "type": typ, "created": created, "data": map[string]any{"object": in}})
	require.NoError(t, err)
	require.True(t, h.Claim(t, "stripe", id, typ, body))
	h.WaitSettled(t, "stripe", id)
}

// driftRow is an invoice row: status due/paid currency customer @version.
func driftRow(t *testing.T, h *ledgertest.Harness, id string) string {
	t.Helper()
	var (
		status, currency, customer string
		due, paid, version         int64
	)
	require.NoError(t, h.DB.SQL.QueryRow(`SELECT status, amount_due, amount_paid, currency, customer_id, version FROM invoice
		WHERE namespace = 'stripe' AND provider = 'stripe' AND external_id = $1`, id).Scan(&status, &due, &paid, &currency, &customer, &version), id)
	return fmt.Sprintf("%s %d/%d %s %s @%d", status, paid, due, currency, customer, version)
}

func newDriftHarness(t *testing.T) *ledgertest.Harness {
	return ledgertest.New(t, 2, func(h *ledgertest.Harness) { invoice.Register(h.Registry) })
}

// TestStripeDriftRepairsMissedInvoiceEvents: Stripe and the invoice table
// agree on one invoice; hookledger missed the payment of another, and
// lacks a third; a draft Stripe deleted is no drift; an open invoice
// Stripe does not have is reported and left. The repairs are
// invoice.updated events the module's handler applies: a row an event of
// a later moment moved before the repair applied stays where that event
// put it, and a second check finds only what cannot be repaired.
func TestStripeDriftRepairsMissedInvoiceEvents(t *testing.T) {
	t.Parallel()
	h := newDriftHarness(t)
	stripe, api := newDriftStripe(t)
	old := time.Now().Add(-time.Hour).Unix()
	for _, id := range []string{"in_sync", "in_missed", "in_gone", "in_raced"} {
		driftSettle(t, h, "invoice.finalized", old, sampleInvoice(t, id, "cus_1", "open", 900, 0))
	}
	driftSettle(t, h, "invoice.created", old, sampleInvoice(t, "in_deleted_draft", "cus_1", "draft", 900, 0))
	stripe.add(t, "in_sync", "cus_1", "open", 900, 0)
	stripe.add(t, "in_missed", "cus_1", "paid", 900, 900)
	stripe.add(t, "in_raced", "cus_1", "paid", 900, 900)
	stripe.add(t, "in_new", "cus_2", "open", 400, 0)

	m := &invoice.StripeDrift{DB: h.DB.SQL, API: api}
	r, got := drifttest.Check(t, h, m)
	want := map[string]string{
		"in_gone":   "missing_at_provider: status open -> -, amount_due 900 -> -, amount_paid 0 -> -, currency usd -> -, customer_id cus_1 -> -",
		"in_missed": "differs: status open -> paid, amount_paid 0 -> 900",
		"in_new":    "missing_here: status - -> open, amount_due - -> 400, amount_paid - -> 0, currency - -> usd, customer_id - -> cus_2",
		"in_raced":  "differs: status open -> paid, amount_paid 0 -> 900",
	}
	require.Equal(t, want, got)
	require.ElementsMatch(t, []string{"in_gone", "in_deleted_draft"}, stripe.fetched, "only the rows the list did not return are read by id")
	require.Equal(t, drift.Counts{Objects: 4, Rows: 5, Matched: 3, Gone: 2, Drifted: 4}, *r.Checked["invoice"])

	plan := r.Plan(drift.StripeEvent)
	// The invoice is voided a second after Stripe answered, and its event
	// reaches hookledger before the repair is applied.
	answered := drifttest.ObjectAt(t, r, "in_raced")
	stripe.add(t, "in_raced", "cus_1", "void", 900, 0)
	driftSettle(t, h, "invoice.voided", answered.Unix()+1, sampleInvoice(t, "in_raced", "cus_1", "void", 900, 0))

	require.Equal(t, map[string]string{
		"in_gone":   "cannot_repair ",
		"in_missed": "repaired invoice.updated",
		"in_new":    "repaired invoice.updated",
		"in_raced":  "superseded invoice.updated",
	}, drifttest.Fix(t, h, plan))
	require.Equal(t, fmt.Sprintf("paid 900/900 usd cus_1 @%d", answered.Unix()), driftRow(t, h, "in_missed"))
	require.Equal(t, fmt.Sprintf("open 0/400 usd cus_2 @%d", answered.Unix()), driftRow(t, h, "in_new"))
	require.Equal(t, fmt.Sprintf("void 0/900 usd cus_1 @%d", answered.Unix()+1), driftRow(t, h, "in_raced"), "the newer event's row is kept")
	require.Equal(t, fmt.Sprintf("open 0/900 usd cus_1 @%d", old), driftRow(t, h, "in_gone"))
	require.Equal(t, fmt.Sprintf("draft 0/900 usd cus_1 @%d", old), driftRow(t, h, "in_deleted_draft"))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM invoice WHERE external_id = 'in_new' AND event_id LIKE 'drift\_in\_new\_%'`),
		"the row names the repair that wrote it")
	require.Equal(t, 3, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'drift\_%' AND replayed AND status = 'settled'
		AND event_type = 'invoice.updated'`))

	_, got = drifttest.Check(t, h, m)
	require.Equal(t, map[string]string{"in_gone": want["in_gone"]}, got, "what cannot be repaired stays reported")
}

// TestStripeDriftReportsAnInvoiceAheadOfStripe: an event dated a day ahead
// (a replay, a clock) wrote a row newer than Stripe's answer. It is
// reported ahead, cannot be repaired, and is never moved back.
func TestStripeDriftReportsAnInvoiceAheadOfStripe(t *testing.T) {
	t.Parallel()
	h := newDriftHarness(t)
	stripe, api := newDriftStripe(t)
	ahead := time.Now().Add(24 * time.Hour).Unix()
	driftSettle(t, h, "invoice.finalized", ahead, sampleInvoice(t, "in_ahead", "cus_1", "open", 900, 0))
	stripe.add(t, "in_ahead", "cus_1", "paid", 900, 900)

	r, err := drift.Check(context.Background(), drift.Options{Namespace: "stripe", Modules: []drift.Module{&invoice.StripeDrift{DB: h.DB.SQL, API: api}}})
	require.NoError(t, err)
	require.Len(t, r.Findings, 1)
	require.Equal(t, drift.Ahead, r.Findings[0].Drift)
	require.Equal(t, ahead, r.Findings[0].RowVersion)

	require.Equal(t, map[string]string{"in_ahead": "cannot_repair "}, drifttest.Fix(t, h, r.Plan(drift.StripeEvent)))
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'drift\_%'`), "nothing claimed")
	require.Equal(t, fmt.Sprintf("open 0/900 usd cus_1 @%d", ahead), driftRow(t, h, "in_ahead"))
}

// TestStripeDriftAfterEraseWritesNoInvoiceBack: after the customer is
// erased, its redacted invoice and an invoice of it hookledger never
// stored are reported apart as erased, not drift; the repairs planned
// before the erase are not claimed, and no row or ledger event holds the
// customer again.
func TestStripeDriftAfterEraseWritesNoInvoiceBack(t *testing.T) {
	t.Parallel()
	h := newDriftHarness(t)
	stripe, api := newDriftStripe(t)
	old := time.Now().Add(-time.Hour).Unix()
	driftSettle(t, h, "invoice.finalized", old, sampleInvoice(t, "in_erased", "cus_erased", "open", 900, 0))
	stripe.add(t, "in_erased", "cus_erased", "paid", 900, 900)
	stripe.add(t, "in_erased_new", "cus_erased", "open", 300, 0)

	m := &invoice.StripeDrift{DB: h.DB.SQL, API: api}
	before, got := drifttest.Check(t, h, m)
	require.Len(t, got, 2, "before the erase both are drift")

	drifttest.Erase(t, h, "cus_erased")
	require.Equal(t, fmt.Sprintf("open 0/900 usd %s @%d", ledger.Erased, old), driftRow(t, h, "in_erased"))

	r, got := drifttest.Check(t, h, m)
	require.Empty(t, got)
	require.Len(t, r.Erased, 2)
	require.Equal(t, 2, r.Checked["invoice"].Erased)
	require.Empty(t, r.Plan(drift.StripeEvent), "nothing to repair")

	require.Equal(t, map[string]string{"in_erased": "erased invoice.updated", "in_erased_new": "erased invoice.updated"},
		drifttest.Fix(t, h, before.Plan(drift.StripeEvent)), "repairs planned before the erase are not claimed")
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'drift\_%'`))
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM invoice i WHERE strpos(i::text, 'cus_erased') > 0`))
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event e WHERE strpos(e::text, 'cus_erased') > 0`))
}

// TestStripeDriftAgainstStripeMock runs the check and its repairs against
// Stripe's official mock, which refuses any parameter the real API would
// refuse: it lists one draft invoice, which hookledger lacks, and answers
// every id with that invoice, whose amount a stored row has wrong.
func TestStripeDriftAgainstStripeMock(t *testing.T) {
	base := stripemock.Start(t)
	h := newDriftHarness(t)
	driftSettle(t, h, "invoice.created", time.Now().Add(-time.Hour).Unix(), sampleInvoice(t, "in_stale", "cus_QXg1o8vcGmoR32", "draft", 500, 0))

	m := &invoice.StripeDrift{DB: h.DB.SQL, API: provider.StripeAPI{Base: base, Key: stripemock.Key}}
	r, got := drifttest.Check(t, h, m)
	require.Len(t, got, 2, "%v", got)
	require.Equal(t, "differs: amount_due 500 -> 1000", got["in_stale"])
	var listed string
	for id, d := range got {
		if id != "in_stale" {
			listed = id
			require.True(t, strings.HasPrefix(id, "in_"), id)
			require.True(t, strings.HasPrefix(d, "missing_here: status - -> draft"), d)
		}
	}

	results := drifttest.Fix(t, h, r.Plan(drift.StripeEvent))
	require.Equal(t, map[string]string{"in_stale": "repaired invoice.updated", listed: "repaired invoice.updated"}, results)
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM invoice WHERE status = 'draft' AND amount_due = 1000 AND event_id LIKE 'drift\_%'`))
	_, got = drifttest.Check(t, h, m)
	require.Empty(t, got)
}
