package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// preparedKey carries what the test's preparer read to its handler.
type preparedKey struct{}

// TestPreparedEventLeavesTheBatch: an event whose type has a preparer is
// taken out of its batch: the others settle while its preparation waits,
// no ledger row is locked meanwhile, and its own job applies it with what
// the preparation read.
func TestPreparedEventLeavesTheBatch(t *testing.T) {
	t.Parallel()
	gate, arrived := make(chan struct{}), make(chan struct{}, 4)
	got := make(chan string, 4)
	h := ledgertest.NewWith(t, ledger.RiverOptions{Workers: 2, ApplyTimeout: 10 * time.Minute}, func(h *ledgertest.Harness) {
		h.Registry.Prepare("stripe", "slow.*", func(ctx context.Context, _ *ent.Client, ev *ledger.Event) (context.Context, error) {
			arrived <- struct{}{}
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx, ctx.Err()
			}
			return context.WithValue(ctx, preparedKey{}, "read for "+ev.EventID), nil
		})
		h.Registry.Handle("stripe", "slow.*", func(ctx context.Context, _ *ledger.Tx, ev *ledger.Event) error {
			v, _ := ctx.Value(preparedKey{}).(string)
			got <- v
			return nil
		})
		h.Registry.Handle("stripe", "fast", func(context.Context, *ledger.Tx, *ledger.Event) error { return nil })
	})
	h.InsertBatch(t, "stripe",
		ledgertest.BatchEvent{ID: "evt_fast_1", Type: "fast", Payload: []byte(`{}`)},
		ledgertest.BatchEvent{ID: "evt_slow", Type: "slow.event", Payload: []byte(`{}`)},
		ledgertest.BatchEvent{ID: "evt_fast_2", Type: "fast", Payload: []byte(`{}`)},
	)
	select {
	case <-arrived:
	case <-time.After(dbtest.Patience):
		t.Fatal("the event was never prepared")
	}
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id LIKE 'evt_fast_%' AND status = 'settled'`) == 2
	}, "the others never settled while the preparation waited")
	require.Equal(t, 3, h.DB.Count(t, `SELECT count(*) FROM (SELECT 1 FROM webhook_event FOR UPDATE NOWAIT) l`),
		"no ledger row is locked while the preparation waits")
	require.Equal(t, "claimed", h.Row(t, "stripe", "evt_slow").Status)
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event' AND args->>'event_id' = 'evt_slow'
		AND state IN ('available', 'scheduled', 'retryable', 'pending', 'running')`), "one job of its own")

	close(gate)
	h.WaitSettled(t, "stripe", "evt_slow")
	require.Equal(t, "read for evt_slow", <-got)
}

// TestPreparationFailureIsTheEvents: a preparer's error fails the event as
// its handler's would, named after the preparer; a permanent one is not
// retried, and a panic is a failure too.
func TestPreparationFailureIsTheEvents(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 2, func(h *ledgertest.Harness) {
		h.Registry.Prepare("stripe", "gone", func(ctx context.Context, _ *ent.Client, _ *ledger.Event) (context.Context, error) {
			return ctx, ledger.Permanent(errors.New("no such object"))
		})
		h.Registry.Prepare("stripe", "panics", func(context.Context, *ent.Client, *ledger.Event) (context.Context, error) {
			panic("prepared badly")
		})
		for _, typ := range []string{"gone", "panics"} {
			h.Registry.Handle("stripe", typ, func(context.Context, *ledger.Tx, *ledger.Event) error { return nil })
		}
	})
	h.Claim(t, "stripe", "evt_gone", "gone", []byte(`{}`))
	h.Claim(t, "stripe", "evt_panics", "panics", []byte(`{}`))
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event' AND args->>'event_id' = 'evt_gone' AND state = 'cancelled'`) == 1
	}, "the permanent failure was retried")
	row := h.Row(t, "stripe", "evt_gone")
	require.Equal(t, "failed", row.Status)
	require.Contains(t, row.LastError.String, "ledger_test.TestPreparationFailureIsTheEvents.func1.1: no such object")
	dbtest.Eventually(t, func() bool { return h.Row(t, "stripe", "evt_panics").Status == "failed" }, "the panic failed nothing")
	require.Contains(t, h.Row(t, "stripe", "evt_panics").LastError.String, "panic: prepared badly")
}
