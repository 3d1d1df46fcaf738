package thin_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/features/thin"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// gatedStripe serves one object, and holds every request for it until the
// test opens the gate: a Stripe that answers when the test says so.
type gatedStripe struct {
	*httptest.Server
	arrived chan struct{} // a request for the object came in
	gate    chan struct{} // closed: answer
	// served counts the requests answered; cut those whose client gave up
	// (its context ended) before the gate opened.
	served, cut atomic.Int32
}

func newGatedStripe(t *testing.T, path, body string) *gatedStripe {
	g := &gatedStripe{arrived: make(chan struct{}, 16), gate: make(chan struct{})}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.Error(w, `{"error":{"code":"resource_missing"}}`, http.StatusNotFound)
			return
		}
		g.arrived <- struct{}{}
		select {
		case <-g.gate:
			g.served.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body))
		case <-r.Context().Done():
			g.cut.Add(1)
		}
	}))
	t.Cleanup(func() {
		select {
		case <-g.gate:
		default:
			close(g.gate)
		}
		g.Close()
	})
	return g
}

// lockable reports whether the events' ledger rows can be locked at once
// from a connection of the test's own: no transaction holds any of them.
func lockable(t *testing.T, db *sql.DB, ids ...string) bool {
	t.Helper()
	tx, err := db.Begin()
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck
	_, err = tx.Exec(`SELECT 1 FROM webhook_event WHERE namespace = 'stripe' AND event_id = ANY($1) FOR UPDATE NOWAIT`, ids)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return false
	}
	require.NoError(t, err)
	return true
}

// TestThinFetchHoldsNoLedgerLock: a thin event applied in a batch with
// ordinary events, Stripe slow to answer its fetch. The siblings settle
// while the fetch is still in flight, and no ledger row (theirs or the
// thin event's) is locked meanwhile; once Stripe answers, the thin event
// is applied from the one fetch.
func TestThinFetchHoldsNoLedgerLock(t *testing.T) {
	t.Parallel()
	api := newGatedStripe(t, "/v1/subscriptions/sub_1", subscriptionJSON)
	got := &applied{}
	// The apply's own timeout is out of the way: only the fetch could hold
	// the batch.
	h := ledgertest.NewWith(t, ledger.RiverOptions{Workers: 2, ApplyTimeout: 10 * time.Minute}, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "customer.subscription.updated", got.handle)
		h.Registry.Handle("stripe", "invoice.paid", func(context.Context, *ledger.Tx, *ledger.Event) error { return nil })
		thin.Register(h.Registry, thin.Config{API: provider.StripeAPI{Base: api.URL, Key: "sk_test_thin"}})
	})
	siblings := []string{"evt_sibling_1", "evt_sibling_2"}
	h.InsertBatch(t, "stripe",
		ledgertest.BatchEvent{ID: siblings[0], Type: "invoice.paid", Payload: []byte(`{"id":"evt_sibling_1","type":"invoice.paid"}`)},
		ledgertest.BatchEvent{ID: "evt_thin_b", Type: "v1.customer.subscription.updated",
			Payload: thinEvent("evt_thin_b", "v1.customer.subscription.updated", relatedSub)},
		ledgertest.BatchEvent{ID: siblings[1], Type: "invoice.paid", Payload: []byte(`{"id":"evt_sibling_2","type":"invoice.paid"}`)},
	)
	select {
	case <-api.arrived:
	case <-time.After(dbtest.Patience):
		t.Fatal("the thin event's object was never fetched")
	}

	dbtest.Eventually(t, func() bool {
		if api.cut.Load() > 0 {
			return true // the fetch ended without an answer: checked below
		}
		settled := h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = ANY($1) AND status = 'settled'`, siblings)
		return settled == len(siblings) && lockable(t, h.DB.SQL, append(siblings, "evt_thin_b")...)
	}, "the siblings never settled while the fetch was in flight")
	require.Zero(t, api.cut.Load(), "the siblings waited for the fetch: they settled only once it was cut off")
	require.Zero(t, api.served.Load(), "the fetch is still in flight")
	require.NotEqual(t, "settled", h.Row(t, "stripe", "evt_thin_b").Status)

	close(api.gate)
	h.WaitSettled(t, "stripe", "evt_thin_b")
	evs := got.all()
	require.Len(t, evs, 1)
	require.Equal(t, "evt_thin_b", evs[0].EventID)
	require.Equal(t, int32(1), api.served.Load(), "one fetch")
	require.Zero(t, api.cut.Load())
}
