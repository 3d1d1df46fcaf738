package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// corpusFile is one entry of testdata/corpus/MANIFEST.json.
type corpusFile struct {
	File       string `json:"file"`
	Provider   string `json:"provider"`
	EventID    string `json:"event_id"`
	HeaderType string `json:"header_type"`
	EventType  string `json:"event_type"`
	Headers    string `json:"headers"`
	// ContentType is application/json unless given.
	ContentType string `json:"content_type"`
	// Answer "ignored" marks a delivery that is answered and never stored.
	Answer string `json:"answer"`
	// Refused, when set, is a known refusal: the product answers this 4xx
	// today (listed in the README under "Real-payload corpus").
	Refused *struct {
		Status int    `json:"status"`
		Cause  string `json:"cause"`
	} `json:"refused"`
	body []byte
}

func loadCorpus(t *testing.T) []corpusFile {
	t.Helper()
	raw, err := os.ReadFile("../testdata/corpus/MANIFEST.json")
	require.NoError(t, err)
	var m struct {
		Files []corpusFile `json:"files"`
	}
	require.NoError(t, json.Unmarshal(raw, &m))
	require.NotEmpty(t, m.Files)
	for i := range m.Files {
		m.Files[i].body, err = os.ReadFile("../testdata/corpus/" + m.Files[i].File)
		require.NoError(t, err)
	}
	return m.Files
}

// delivery is one answered POST.
type delivery struct {
	code    int
	status  string
	id      string
	errText string
	err     error
}

// send posts f signed as its provider signs it, now. It reports instead of
// failing, so that it can run on any goroutine.
func (s *server) send(f corpusFile) delivery {
	secret := providerSecrets[f.Provider]
	h, err := senderSign(f, secret, time.Now())
	if err != nil {
		return delivery{err: err}
	}
	if err := officialVerify(f, h, secret); err != nil {
		return delivery{err: fmt.Errorf("%s: the provider's library refuses the signature: %w", f.File, err)}
	}
	req, err := http.NewRequest(http.MethodPost, s.base+"/webhooks/"+f.Provider, bytes.NewReader(f.body))
	if err != nil {
		return delivery{err: err}
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	if f.ContentType != "" {
		req.Header.Set("Content-Type", f.ContentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return delivery{err: err}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		Status    string `json:"status"`
		EventID   string `json:"event_id"`
		Challenge string `json:"challenge"`
		Error     string `json:"error"`
	}
	_ = json.Unmarshal(raw, &out)
	if out.Challenge != "" {
		out.Status = "challenge"
	}
	return delivery{code: resp.StatusCode, status: out.Status, id: out.EventID, errText: out.Error}
}

// sendAll sends every file copies times at once, workers files at a time,
// in the given order, and returns the answers per file.
func (s *server) sendAll(files []corpusFile, copies, workers int) [][]delivery {
	out := make([][]delivery, len(files))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				answers := make([]delivery, copies)
				var each sync.WaitGroup
				for c := range copies {
					each.Add(1)
					go func() { defer each.Done(); answers[c] = s.send(files[i]) }()
				}
				each.Wait()
				out[i] = answers
			}
		}()
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// storedPayload returns the ledger's copy of an event's body and whether
// the column keeps the delivered bytes exactly (jsonb does not: it drops
// whitespace and key order, so only the JSON value can be compared).
func storedPayload(t *testing.T, db *dbtest.DB, namespace, eventID string) ([]byte, bool) {
	t.Helper()
	var colType string
	require.NoError(t, db.SQL.QueryRow(`SELECT data_type FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'webhook_event' AND column_name = 'payload'`).Scan(&colType))
	query := `SELECT payload::text FROM webhook_event WHERE namespace = $1 AND event_id = $2`
	if colType == "bytea" {
		query = `SELECT payload FROM webhook_event WHERE namespace = $1 AND event_id = $2`
	}
	var stored []byte
	require.NoError(t, db.SQL.QueryRow(query, namespace, eventID).Scan(&stored))
	return stored, colType != "jsonb"
}

// TestCorpus sends every official example payload of testdata/corpus
// through the real HTTP path, signed as its provider signs it: first in
// reverse order with two concurrent copies of each, then again in order.
// Each stored event gets exactly one ledger row holding the bytes sent,
// and every row settles; the business tables end as the newest event of
// each object says, whatever the order of arrival.
func TestCorpus(t *testing.T) {
	t.Parallel()
	files := loadCorpus(t)
	s := allProviders(t)

	reversed := make([]corpusFile, len(files))
	for i, f := range files {
		reversed[len(files)-1-i] = f
	}
	first := s.sendAll(reversed, 2, 8)
	second := s.sendAll(files, 1, 8)

	stored := map[string]corpusFile{} // namespace/event_id
	var refusals, refused []string
	for i, f := range reversed {
		answers := append(first[i], second[len(files)-1-i]...)
		for _, a := range answers {
			require.NoError(t, a.err, f.File)
		}
		if f.Answer == "ignored" {
			for _, a := range answers {
				require.Equal(t, http.StatusOK, a.code, f.File)
				require.Empty(t, a.id, "%s is answered, never stored", f.File)
			}
			continue
		}
		if f.Refused != nil && answers[0].code == f.Refused.Status {
			for _, a := range answers {
				require.Equal(t, f.Refused.Status, a.code, "%s: a refusal is the same every time", f.File)
			}
			refusals = append(refusals, fmt.Sprintf("%s: %d (%s)", f.File, f.Refused.Status, f.Refused.Cause))
			continue
		}
		if answers[0].code != http.StatusOK {
			refused = append(refused, fmt.Sprintf("%s answered %d %s", f.File, answers[0].code, answers[0].errText))
			continue
		}
		counts := map[string]int{}
		for _, a := range answers[:2] {
			require.Equal(t, http.StatusOK, a.code, "%s answered %d", f.File, a.code)
			require.Equal(t, f.EventID, a.id, f.File)
			counts[a.status]++
		}
		require.Equal(t, map[string]int{"claimed": 1, "duplicate": 1}, counts, "%s: two concurrent copies, one claim", f.File)
		require.Equal(t, http.StatusOK, answers[2].code, f.File)
		require.Equal(t, "duplicate", answers[2].status, "%s sent again", f.File)
		key := f.Provider + "/" + f.EventID
		require.NotContains(t, stored, key, "corpus ids are unique per provider")
		stored[key] = f
	}
	for _, r := range refusals {
		t.Logf("known refusal: %s", r)
	}
	require.Empty(t, refused, "refusals not listed in the manifest")

	waitAllSettled(t, s.db, len(stored))

	rows, err := s.db.SQL.Query(`SELECT namespace, event_id, source, event_type FROM webhook_event`)
	require.NoError(t, err)
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var ns, id, source, typ string
		require.NoError(t, rows.Scan(&ns, &id, &source, &typ))
		f, ok := stored[ns+"/"+id]
		require.True(t, ok, "unexpected ledger row %s/%s", ns, id)
		require.Equal(t, f.Provider, source, f.File)
		require.Equal(t, f.EventType, typ, f.File)
		seen++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(stored), seen, "exactly one row per stored event")

	reshaped := 0
	for _, f := range stored {
		payload, exact := storedPayload(t, s.db, f.Provider, f.EventID)
		if exact {
			require.Equal(t, string(f.body), string(payload), "%s: the stored payload is the delivered bytes", f.File)
			continue
		}
		require.JSONEq(t, string(f.body), string(payload), f.File)
		if !bytes.Equal(f.body, payload) {
			reshaped++
		}
	}
	if reshaped > 0 {
		t.Logf("the payload column is jsonb: %d of %d stored bodies differ from the delivered bytes (same JSON value)", reshaped, len(stored))
	}

	checkBusinessTables(t, s.db, files)
}

// waitAllSettled polls until want ledger rows exist and all are settled,
// and fails with the unsettled rows and their errors at the deadline.
func waitAllSettled(t *testing.T, db *dbtest.DB, want int) {
	t.Helper()
	settled := func() (int, int) {
		return db.Count(t, `SELECT count(*) FROM webhook_event`),
			db.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`)
	}
	deadline := time.After(dbtest.Patience)
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for waiting := true; waiting; {
		select {
		case <-poll.C:
			if total, done := settled(); total == want && done == want {
				return
			}
		case <-deadline:
			waiting = false
		}
	}
	total, done := settled()
	rows, err := db.SQL.Query(`SELECT event_id, event_type, status, coalesce(last_error, '') FROM webhook_event
		WHERE status <> 'settled' ORDER BY event_type LIMIT 50`)
	require.NoError(t, err)
	defer rows.Close()
	var stuck []string
	for rows.Next() {
		var id, typ, status, lastErr string
		require.NoError(t, rows.Scan(&id, &typ, &status, &lastErr))
		stuck = append(stuck, fmt.Sprintf("%s %s %s: %s", typ, id, status, lastErr))
	}
	t.Fatalf("%d rows (want %d), %d settled; unsettled:\n%s", total, want, done, strings.Join(stuck, "\n"))
}

// checkBusinessTables compares the module tables with what the corpus
// says: per object, the newest event wins; payment amounts only grow;
// usage quantities add up.
func checkBusinessTables(t *testing.T, db *dbtest.DB, files []corpusFile) {
	t.Helper()
	type sub struct {
		customer, plan, status string
		version                int64
		tie                    bool
	}
	wantSubs := map[string]sub{} // provider/external_id
	keepNewest := func(key string, s sub) {
		old, ok := wantSubs[key]
		switch {
		case !ok || s.version > old.version:
			wantSubs[key] = s
		case s.version == old.version:
			old.tie = true
			wantSubs[key] = old
		}
	}
	type pay struct {
		customer, currency string
		amount, refunded   int64
	}
	wantPays := map[string]pay{}
	addPay := func(key string, p pay) {
		old := wantPays[key]
		p.amount = max(p.amount, old.amount)
		p.refunded = max(p.refunded, old.refunded)
		if old.customer != "" {
			p.customer = old.customer
		}
		if old.currency != "" {
			p.currency = old.currency
		}
		wantPays[key] = p
	}
	wantUsage := map[string]int64{}
	wantBranches := map[string]bool{} // repository ref

	for _, f := range files {
		switch {
		case f.Provider == "stripe" && strings.HasPrefix(f.EventType, "customer.subscription."):
			var ev stripeCorpusEvent
			require.NoError(t, json.Unmarshal(f.body, &ev), f.File)
			o := ev.Data.Object
			status := o.Status
			if f.EventType == "customer.subscription.deleted" {
				status = "canceled"
			}
			keepNewest("stripe/"+o.ID, sub{customer: provider.StripeID(o.Customer), plan: o.Items.Data[0].Price.ID, status: status, version: ev.Created})
		case f.Provider == "stripe" && f.EventType == "payment_intent.succeeded":
			var ev stripeCorpusEvent
			require.NoError(t, json.Unmarshal(f.body, &ev), f.File)
			o := ev.Data.Object
			amount := o.AmountReceived
			if amount == 0 {
				amount = o.Amount
			}
			addPay("stripe/"+o.ID, pay{customer: provider.StripeID(o.Customer), currency: o.Currency, amount: amount})
		case f.Provider == "stripe" && f.EventType == "charge.refunded":
			var ev stripeCorpusEvent
			require.NoError(t, json.Unmarshal(f.body, &ev), f.File)
			o := ev.Data.Object
			id := provider.StripeID(o.PaymentIntent)
			if id == "" {
				id = o.ID
			}
			addPay("stripe/"+id, pay{customer: provider.StripeID(o.Customer), currency: o.Currency, amount: o.Amount, refunded: o.AmountRefunded})
		case f.Provider == "paddle" && strings.HasPrefix(f.EventType, "subscription."):
			var ev paddleCorpusEvent
			require.NoError(t, json.Unmarshal(f.body, &ev), f.File)
			plan := ""
			if len(ev.Data.Items) > 0 {
				plan = ev.Data.Items[0].Price.ID
			}
			keepNewest("paddle/"+ev.Data.ID, sub{customer: ev.Data.CustomerID, plan: plan, status: ev.Data.Status, version: ev.OccurredAt.UnixMicro()})
		case f.Provider == "paddle" && f.EventType == "transaction.completed":
			var ev paddleCorpusEvent
			require.NoError(t, json.Unmarshal(f.body, &ev), f.File)
			var amount int64
			_, err := fmt.Sscan(ev.Data.Details.Totals.GrandTotal, &amount)
			require.NoError(t, err, f.File)
			addPay("paddle/"+ev.Data.ID, pay{customer: ev.Data.CustomerID, currency: ev.Data.CurrencyCode, amount: amount})
		case f.Provider == "github" && f.EventType == "push" && f.Refused == nil:
			var ev struct {
				Ref        string `json:"ref"`
				Repository struct {
					FullName string `json:"full_name"`
				} `json:"repository"`
			}
			require.NoError(t, json.Unmarshal(f.body, &ev), f.File)
			wantBranches[ev.Repository.FullName+" "+ev.Ref] = true
		case f.Provider == "standard" && f.EventType == "usage.recorded":
			var ev struct {
				Data struct {
					CustomerID string `json:"customer_id"`
					Metric     string `json:"metric"`
					Quantity   int64  `json:"quantity"`
				} `json:"data"`
			}
			require.NoError(t, json.Unmarshal(f.body, &ev), f.File)
			wantUsage[ev.Data.CustomerID+"/"+ev.Data.Metric] += ev.Data.Quantity
		}
	}
	require.NotEmpty(t, wantSubs)
	require.NotEmpty(t, wantPays)
	require.NotEmpty(t, wantUsage)
	require.NotEmpty(t, wantBranches)
	t.Logf("business rows checked: %d subscriptions, %d payments, %d usage totals, %d branches",
		len(wantSubs), len(wantPays), len(wantUsage), len(wantBranches))

	require.Equal(t, len(wantSubs), db.Count(t, `SELECT count(*) FROM subscription`))
	for key, want := range sortedKeys(wantSubs) {
		prov, id, _ := strings.Cut(key, "/")
		var got sub
		require.NoError(t, db.SQL.QueryRow(`SELECT customer_id, plan, status, version FROM subscription WHERE provider = $1 AND external_id = $2`, prov, id).
			Scan(&got.customer, &got.plan, &got.status, &got.version), key)
		require.Equal(t, want.version, got.version, "%s: the newest event's version", key)
		if !want.tie {
			require.Equal(t, sub{customer: want.customer, plan: want.plan, status: want.status, version: want.version}, got, key)
		}
	}

	require.Equal(t, len(wantPays), db.Count(t, `SELECT count(*) FROM payment`))
	for key, want := range sortedKeys(wantPays) {
		prov, id, _ := strings.Cut(key, "/")
		var got pay
		var status string
		require.NoError(t, db.SQL.QueryRow(`SELECT customer_id, currency, amount, amount_refunded, status FROM payment WHERE provider = $1 AND external_id = $2`, prov, id).
			Scan(&got.customer, &got.currency, &got.amount, &got.refunded, &status), key)
		require.Equal(t, want, got, key)
		wantStatus := "succeeded"
		switch {
		case want.refunded >= want.amount && want.refunded > 0:
			wantStatus = "refunded"
		case want.refunded > 0:
			wantStatus = "partially_refunded"
		}
		require.Equal(t, wantStatus, status, key)
	}
	require.Equal(t, len(wantPays), db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'payment_receipt'`), "one receipt per payment")

	require.Equal(t, len(wantBranches), db.Count(t, `SELECT count(*) FROM github_branch`))
	for key := range wantBranches {
		repo, ref, _ := strings.Cut(key, " ")
		require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM github_branch WHERE repository = $1 AND ref = $2`, repo, ref), key)
	}

	require.Equal(t, len(wantUsage), db.Count(t, `SELECT count(*) FROM usage_total`))
	for key, want := range sortedKeys(wantUsage) {
		cust, metric, _ := strings.Cut(key, "/")
		var got int64
		require.NoError(t, db.SQL.QueryRow(`SELECT quantity FROM usage_total WHERE customer_id = $1 AND metric = $2`, cust, metric).Scan(&got))
		require.Equal(t, want, got, "%s: each usage event counted once", key)
	}
}

// sortedKeys iterates a map in key order, so failures read the same each run.
func sortedKeys[V any](m map[string]V) func(func(string, V) bool) {
	return func(yield func(string, V) bool) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}

type stripeCorpusEvent struct {
	Created int64 `json:"created"`
	Data    struct {
		Object struct {
			ID             string          `json:"id"`
			Status         string          `json:"status"`
			Customer       json.RawMessage `json:"customer"`
			PaymentIntent  json.RawMessage `json:"payment_intent"`
			Amount         int64           `json:"amount"`
			AmountReceived int64           `json:"amount_received"`
			AmountRefunded int64           `json:"amount_refunded"`
			Currency       string          `json:"currency"`
			Items          struct {
				Data []struct {
					Price struct {
						ID string `json:"id"`
					} `json:"price"`
				} `json:"data"`
			} `json:"items"`
		} `json:"object"`
	} `json:"data"`
}

type paddleCorpusEvent struct {
	OccurredAt time.Time `json:"occurred_at"`
	Data       struct {
		ID           string `json:"id"`
		Status       string `json:"status"`
		CustomerID   string `json:"customer_id"`
		CurrencyCode string `json:"currency_code"`
		Items        []struct {
			Price struct {
				ID string `json:"id"`
			} `json:"price"`
		} `json:"items"`
		Details struct {
			Totals struct {
				GrandTotal string `json:"grand_total"`
			} `json:"totals"`
		} `json:"details"`
	} `json:"data"`
}
