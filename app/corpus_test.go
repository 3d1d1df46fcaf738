package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	// today (listed in docs/providers.md under "Real-payload corpus").
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
// every row settles, and the modules the app registers apply them.
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

	checkModulesApplied(t, s.db)
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

// checkModulesApplied checks that the corpus reached the modules the app
// registers: each module's table has rows, and every stored event of a
// type some module handles names it among its handlers. What the rows
// hold is each module's own expectation, in its Conformance test
// (modules/features/*/conformance_test.go), on the same corpus.
func checkModulesApplied(t *testing.T, db *dbtest.DB) {
	t.Helper()
	for _, table := range []string{"subscription", "payment", "github_branch", "usage_total"} {
		require.NotZero(t, db.Count(t, `SELECT count(*) FROM `+table), "the corpus's events reached the %s table", table)
	}
	for _, c := range []struct{ provider, pattern, module string }{
		{"stripe", "customer.subscription.%", "subscription"},
		{"paddle", "subscription.%", "subscription"},
		{"stripe", "payment_intent.succeeded", "payment"},
		{"paddle", "transaction.completed", "payment"},
		{"github", "push", "branchhead"},
		{"standard", "usage.recorded", "usage"},
	} {
		require.Zero(t, db.Count(t, `SELECT count(*) FROM webhook_event WHERE provider = $1 AND event_type LIKE $2 AND NOT handlers ? $3`,
			c.provider, c.pattern, c.module), "%s %s events are applied by the %s module", c.provider, c.pattern, c.module)
		require.NotZero(t, db.Count(t, `SELECT count(*) FROM webhook_event WHERE provider = $1 AND event_type LIKE $2`, c.provider, c.pattern))
	}
}
