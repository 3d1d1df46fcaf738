package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/features/payment"
	"github.com/hookledger/hookledger/modules/features/subscription"
	"github.com/hookledger/hookledger/modules/features/thin"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// thinTwin is a thin event of testdata/providers/stripe/thin and the
// snapshot event it is the thin version of.
type thinTwin struct {
	thinID, thinType, snapID, snapType string
	thinBody, snapBody                 []byte
	relatedURL, context                string
	object                             json.RawMessage
}

func loadThinTwins(t *testing.T) []thinTwin {
	t.Helper()
	dir := "../testdata/providers/stripe/thin"
	raw, err := os.ReadFile(filepath.Join(dir, "MANIFEST.json"))
	require.NoError(t, err)
	var m struct {
		Files []struct {
			File         string `json:"file"`
			SnapshotTwin string `json:"snapshot_twin"`
		} `json:"files"`
	}
	require.NoError(t, json.Unmarshal(raw, &m))
	var out []thinTwin
	for _, f := range m.Files {
		if f.SnapshotTwin == "" {
			continue
		}
		var tw thinTwin
		tw.thinBody, err = os.ReadFile(filepath.Join(dir, f.File))
		require.NoError(t, err)
		tw.snapBody, err = os.ReadFile(filepath.Join(dir, f.SnapshotTwin))
		require.NoError(t, err)
		var te struct {
			ID, Type, Context string
			SnapshotEvent     string               `json:"snapshot_event"`
			Related           struct{ URL string } `json:"related_object"`
		}
		require.NoError(t, json.Unmarshal(tw.thinBody, &te))
		var se struct {
			ID, Type string
			Data     struct {
				Object json.RawMessage `json:"object"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(tw.snapBody, &se))
		require.Equal(t, se.ID, te.SnapshotEvent, f.File)
		require.Equal(t, "v1."+se.Type, te.Type, f.File)
		tw.thinID, tw.thinType, tw.snapID, tw.snapType = te.ID, te.Type, se.ID, se.Type
		tw.relatedURL, tw.context, tw.object = te.Related.URL, te.Context, se.Data.Object
		out = append(out, tw)
	}
	require.Len(t, out, 3, "subscription, payment and refund twins")
	return out
}

// TestThinEventsGiveTheSnapshotRows sends the thin events of testdata and
// their snapshot twins, each scenario in a namespace of its own: snapshot
// events only, thin events only, snapshot first, thin first (its write
// committed before the twin arrives), and both at once. A fake Stripe API
// serves each related object as the snapshot's data.object. Every
// scenario ends with the same subscription and payment rows, and each
// payment with exactly one receipt job.
func TestThinEventsGiveTheSnapshotRows(t *testing.T) {
	t.Parallel()
	twins := loadThinTwins(t)
	var (
		mu       sync.Mutex
		contexts = map[string]string{}
	)
	objects := map[string]json.RawMessage{}
	for _, tw := range twins {
		objects[tw.relatedURL] = tw.object
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		obj, ok := objects[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		contexts[r.URL.Path] = r.Header.Get("Stripe-Context")
		mu.Unlock()
		_, _ = w.Write(obj)
	}))
	defer api.Close()

	// Each scenario gets a database of its own: a payment's receipt job is
	// unique by payment id across namespaces.
	run := func(t *testing.T, scenario func(h *ledgertest.Harness)) ([]string, int) {
		h := ledgertest.New(t, 2, func(h *ledgertest.Harness) {
			subscription.Register(h.Registry, subscription.Config{DB: h.DB.SQL, Metrics: h.Metrics,
				StripeAPI: provider.StripeAPI{Base: api.URL, Key: "sk_test_thin"}})
			payment.Register(h.Registry, payment.Config{DB: h.DB.SQL, Sender: nopSender{}})
			thin.Register(h.Registry, thin.Config{API: provider.StripeAPI{Base: api.URL, Key: "sk_test_thin"}})
		})
		scenario(h)
		quiet(t, h)
		return businessRows(t, h), h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'payment_receipt'`)
	}
	snapshots := func(h *ledgertest.Harness) {
		for _, tw := range twins {
			claimTwin(t, h, tw.snapID, tw.snapType, tw.snapBody)
		}
	}
	thins := func(h *ledgertest.Harness) {
		for _, tw := range twins {
			claimTwin(t, h, tw.thinID, tw.thinType, tw.thinBody)
		}
	}
	scenarios := []struct {
		name string
		run  func(h *ledgertest.Harness)
	}{
		{"snapshot-only", snapshots},
		{"thin-only", thins},
		{"snapshot-first", func(h *ledgertest.Harness) { snapshots(h); quiet(t, h); thins(h) }},
		{"thin-first", func(h *ledgertest.Harness) { thins(h); quiet(t, h); snapshots(h) }},
		{"concurrent", func(h *ledgertest.Harness) {
			var wg sync.WaitGroup
			errs := make(chan error, 2*len(twins))
			for _, tw := range twins {
				wg.Add(2)
				go func() { defer wg.Done(); errs <- claimErr(h, tw.snapID, tw.snapType, tw.snapBody) }()
				go func() { defer wg.Done(); errs <- claimErr(h, tw.thinID, tw.thinType, tw.thinBody) }()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
		}},
	}
	var want []string
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			rows, receipts := run(t, sc.run)
			if want == nil {
				want = rows
				require.Len(t, want, 3, "one subscription and two payments")
			}
			require.Equal(t, want, rows)
			require.Equal(t, 2, receipts, "one receipt job per payment")
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for _, tw := range twins {
		require.Equal(t, tw.context, contexts[tw.relatedURL], "Stripe-Context of %s", tw.relatedURL)
	}
}

func claimErr(h *ledgertest.Harness, id, typ string, body []byte) error {
	_, err := h.Claimer.Claim(context.Background(), ledger.Claim{Namespace: "stripe", EventID: id, Provider: "stripe", Source: "stripe", Type: typ, Payload: body})
	return err
}

func claimTwin(t *testing.T, h *ledgertest.Harness, id, typ string, body []byte) {
	t.Helper()
	require.NoError(t, claimErr(h, id, typ, body))
}

// quiet waits until every event settled and no job is pending.
func quiet(t *testing.T, h *ledgertest.Harness) {
	t.Helper()
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE status <> 'settled'`) == 0 &&
			h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND state NOT IN ('completed', 'cancelled', 'discarded')`) == 0
	}, "events or jobs still pending")
}

// businessRows lists the subscription and payment rows, without
// their provenance (the event that wrote them, tie ranks, timestamps).
func businessRows(t *testing.T, h *ledgertest.Harness) []string {
	t.Helper()
	rows, err := h.DB.SQL.Query(`
		SELECT 'subscription ' || external_id || ' ' || customer_id || ' ' || plan || ' ' || status || ' v' || version FROM subscription
		UNION ALL
		SELECT 'payment ' || external_id || ' ' || customer_id || ' ' || amount || '/' || amount_refunded || ' ' || currency || ' ' || status || ' v' || version FROM payment
		ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

type nopSender struct{}

func (nopSender) SendReceipt(context.Context, payment.Receipt) error { return nil }
