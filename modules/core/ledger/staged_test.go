package ledger_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// effects is a staged write: the ids of a batch's events, inserted in one
// statement. It fails, or panics, when the batch holds the bad event.
type effects struct{ ids []string }

type effectsKey struct{}

func (e *effects) Flush(ctx context.Context, tx *ledger.Tx) error {
	for _, id := range e.ids {
		switch id {
		case "evt_bad_error":
			return errors.New("staged write refused evt_bad_error")
		case "evt_bad_panic":
			panic("staged write panicked on evt_bad_panic")
		}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO staged_effect SELECT unnest($1::text[])`, e.ids)
	return err
}

// TestStagedWriteFailsOnlyItsEvent: a staged write runs once for the whole
// batch, after its handlers; when it fails (an error or a panic), nothing
// of the batch is kept, the batch splits, and each event's own job finds
// the one that fails: its row is failed with the reason and a retry of its
// own, and its siblings settle with their effect exactly once.
func TestStagedWriteFailsOnlyItsEvent(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"evt_bad_error", "evt_bad_panic"} {
		t.Run(bad, func(t *testing.T) {
			t.Parallel()
			h := ledgertest.New(t, 2, func(h *ledgertest.Harness) {
				h.Registry.Handle("stripe", "invoice.paid", func(_ context.Context, tx *ledger.Tx, ev *ledger.Event) error {
					w := ledger.Stage(tx, effectsKey{}, func() *effects { return &effects{} })
					w.ids = append(w.ids, ev.EventID)
					return nil
				})
			})
			_, err := h.DB.SQL.Exec(`CREATE TABLE staged_effect (event_id text PRIMARY KEY)`)
			require.NoError(t, err)
			insertBatch(t, h, "invoice.paid", "evt_sib_a", bad, "evt_sib_b")
			h.WaitSettled(t, "stripe", "evt_sib_a")
			h.WaitSettled(t, "stripe", "evt_sib_b")
			row := waitRow(t, h, bad, "failed", func(r ledgertest.Row) bool { return r.Status == "failed" })
			require.Contains(t, row.LastError.String, "staged write")
			require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM staged_effect WHERE event_id IN ('evt_sib_a', 'evt_sib_b')`))
			require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM staged_effect WHERE event_id = $1`, bad))
			requireOwnRetry(t, h, bad)
		})
	}
}

// TestStageRefusesKeysItCannotCompare: a key Stage could not find again
// panics at the first Stage, not at the second of a batch.
func TestStageRefusesKeysItCannotCompare(t *testing.T) {
	t.Parallel()
	type listKey struct{ names []string }
	require.PanicsWithValue(t, "ledger.Stage: key is nil or not comparable", func() {
		ledger.Stage(&ledger.Tx{}, listKey{}, func() *effects { return &effects{} })
	})
	tx := &ledger.Tx{}
	first := ledger.Stage(tx, effectsKey{}, func() *effects { return &effects{} })
	require.Same(t, first, ledger.Stage(tx, effectsKey{}, func() *effects { return &effects{} }))
}
