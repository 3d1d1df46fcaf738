package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// TestMisbehavingHandlers runs a mix of handlers that panic, hang past the
// apply's timeout, call an API that is down for a while, fail for good, and
// succeed, under group commit with every event delivered three times at
// once. Every event must end settled with its effect exactly once, or (the
// poison ones) failed with the reason and no effect: nothing stranded
// claimed, nothing applied twice.
func TestMisbehavingHandlers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs apply timeouts and retries")
	}
	const perKind = 30
	kinds := []string{"ok", "panic", "hang", "api", "poison"}

	var apiCalls atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Down for the first 45 calls (the first try of every "api" event
		// and the retry of some), then up.
		if apiCalls.Add(1) <= 45 {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer api.Close()
	hung := make(chan struct{})
	defer close(hung)

	var mu sync.Mutex
	tries := map[string]int{}
	h := ledgertest.NewWith(t, ledger.RiverOptions{Workers: 4, ApplyTimeout: 2 * time.Second}, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
			mu.Lock()
			tries[ev.EventID]++
			n := tries[ev.EventID]
			mu.Unlock()
			kind := ev.EventID[len("evt_mis_"):]
			kind = kind[:len(kind)-3]
			// Every handler writes its effect first: a failure after it must
			// roll it back with the apply.
			if _, err := tx.ExecContext(ctx, `INSERT INTO test_effect (event_id) VALUES ($1)`, ev.EventID); err != nil {
				return err
			}
			switch {
			case kind == "panic" && n == 1:
				var m map[string]int
				m["boom"]++ // a nil map: a real bug, not a panic("...")
			case kind == "hang" && n == 1:
				<-hung // an outbound call that ignores its context
			case kind == "api":
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.URL, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return fmt.Errorf("billing API: %w", err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("billing API answered %d", resp.StatusCode)
				}
			case kind == "poison":
				return ledger.Permanent(errors.New("poison payload"))
			}
			return nil
		})
	})
	_, err := h.DB.SQL.Exec(`CREATE TABLE test_effect (event_id text NOT NULL)`)
	require.NoError(t, err)

	b := newBatcher(t, h, 2)
	var ids []string
	for _, k := range kinds {
		for i := range perKind {
			ids = append(ids, fmt.Sprintf("evt_mis_%s%03d", k, i))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(ids)*3)
	var acked atomic.Int32
	for _, id := range ids {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), dbtest.Patience)
				defer cancel()
				if _, err := b.Claim(ctx, claimOf(id, "invoice.paid")); err != nil {
					errs <- fmt.Errorf("%s: %w", id, err)
					return
				}
				acked.Add(1)
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Every acknowledged event ends settled or failed-for-good.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		open := h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'claimed' OR (status = 'failed' AND event_id NOT LIKE 'evt_mis_poison%')`)
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events never settled", open)
		}
		time.Sleep(50 * time.Millisecond) // polling the outcome, not synchronising
	}
	require.Equal(t, len(ids), h.DB.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Equal(t, 4*perKind, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'settled'`))
	require.Equal(t, perKind, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE status = 'failed' AND last_error LIKE '%poison payload%'`))
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM (SELECT event_id FROM test_effect GROUP BY event_id HAVING count(*) > 1) d`), "applied twice")
	require.Equal(t, 4*perKind, h.DB.Count(t, `SELECT count(DISTINCT event_id) FROM test_effect`), "every settled event's effect, and no poison one's")
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM test_effect WHERE event_id LIKE 'evt_mis_poison%'`))
	for _, k := range []string{"panic", "hang", "api"} {
		require.Positive(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE $1 AND attempts > 1`, "evt_mis_"+k+"%"),
			"%s events failed before they settled", k)
	}
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind IN ('apply_event', 'apply_batch') AND finalized_at IS NULL`),
		"no job left behind")
	var batches, maxAttempts int
	require.NoError(t, h.DB.SQL.QueryRow(`SELECT count(*) FROM river_job WHERE kind = 'apply_batch'`).Scan(&batches))
	require.NoError(t, h.DB.SQL.QueryRow(`SELECT max(attempts) FROM webhook_event`).Scan(&maxAttempts))
	t.Logf("figures: %d events, %d deliveries acknowledged, %d batch jobs, %d settled, %d failed for good, 0 applied twice, 0 stranded, most attempts %d",
		len(ids), acked.Load(), batches, 4*perKind, perKind, maxAttempts)
}
