package ledger_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// TestEraseMatchesStringValuesExactly: a payload holds the subject when a
// JSON string anywhere in it (a value or a key) is the subject, escaped or
// not; a longer string does not; a form body holds it as text or
// URL-encoded.
// Rows still to be applied are reported and left.
func TestEraseMatchesStringValuesExactly(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	payloads := map[string]string{
		"evt_plain":   `{"data":{"object":{"customer":"ana@example.com"}}}`,
		"evt_escaped": `{"data":{"list":[{"email":"ana\u0040example.com"}]}}`,
		"evt_key":     `{"ana@example.com":"x"}`,
		"evt_longer":  `{"email":"ana@example.com.evil"}`,
		"evt_form":    `text=hello&user=ana%40example.com`,
		"evt_shadow":  `{"email":"ana@example.com","email":"x"}`,
		"evt_pending": `{"customer":"ana@example.com"}`,
		"evt_empty":   ``,
	}
	for id, p := range payloads {
		h.Claim(t, "stripe", id, "x", []byte(p))
	}
	_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET status = 'settled' WHERE event_id <> 'evt_pending'`)
	require.NoError(t, err)

	dry, err := h.Claimer.Erase(ctx, "ana@example.com", "", true)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"evt_plain", "evt_escaped", "evt_key", "evt_form", "evt_shadow"}, eraseIDs(dry.Rows))
	require.Equal(t, []string{"evt_pending"}, eraseIDs(dry.Pending))
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE erased_at IS NOT NULL`))

	other, err := h.Claimer.Erase(ctx, "ana@example.com", "github", false)
	require.NoError(t, err)
	require.Empty(t, other.Rows, "another namespace")

	done, err := h.Claimer.Erase(ctx, "ana@example.com", "stripe", false)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"evt_plain", "evt_escaped", "evt_key", "evt_form", "evt_shadow"}, eraseIDs(done.Rows))
	require.Equal(t, 5, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE payload = $1 AND erased_at IS NOT NULL`, ledger.ErasedPayload))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_pending' AND erased_at IS NULL`))

	_, err = h.Claimer.Erase(ctx, "", "", true)
	require.Error(t, err, "an empty subject matches everything")
}

func eraseIDs(ms []ledger.EraseMatch) []string {
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.EventID)
	}
	return ids
}

// eraseProbe registers, on h's registry, EraseFuncs that erase rows of a
// table of the test's own: the first redacts the subject's rows, the
// second fails when fail says so.
func eraseProbe(t *testing.T, reg *ledger.Registry, fail *bool) {
	t.Helper()
	reg.Erase(func(ctx context.Context, tx *ledger.Tx, subject, namespace string, _ bool) (int64, error) {
		res, err := tx.ExecContext(ctx, `UPDATE erase_probe SET customer = $3 WHERE customer = $1 AND ($2 = '' OR namespace = $2)`,
			subject, namespace, ledger.Erased)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
	reg.Erase(func(context.Context, *ledger.Tx, string, string, bool) (int64, error) {
		if *fail {
			return 0, errors.New("probe refused")
		}
		return 1, nil
	})
}

// TestEraseModulesRunsEveryHookInOneTransaction: EraseModules reports the
// rows each module erased, one entry per module; a dry run reports the
// same and changes nothing; a module that fails is named and no module's
// rows change.
func TestEraseModulesRunsEveryHookInOneTransaction(t *testing.T) {
	t.Parallel()
	fail := false
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) { eraseProbe(t, h.Registry, &fail) })
	ctx := context.Background()
	_, err := h.DB.SQL.Exec(`CREATE TABLE erase_probe (namespace text, customer text);
		INSERT INTO erase_probe VALUES ('stripe', 'cus_A'), ('stripe', 'cus_A'), ('other', 'cus_A'), ('stripe', 'cus_B')`)
	require.NoError(t, err)
	held := func() int { return h.DB.Count(t, `SELECT count(*) FROM erase_probe WHERE customer = 'cus_A'`) }

	dry, err := h.Claimer.EraseModules(ctx, h.Registry, "cus_A", "stripe", true)
	require.NoError(t, err)
	require.Equal(t, []ledger.ModuleErasure{{Module: "ledger_test", Rows: 3}}, dry, "two hooks of one module are one entry")
	require.Equal(t, 3, held(), "a dry run changes nothing, though the hook wrote")

	fail = true
	_, err = h.Claimer.EraseModules(ctx, h.Registry, "cus_A", "", false)
	require.ErrorContains(t, err, "module ledger_test")
	require.ErrorContains(t, err, "probe refused")
	require.Equal(t, 3, held(), "a failing hook rolls back the others")

	fail = false
	done, err := h.Claimer.EraseModules(ctx, h.Registry, "cus_A", "stripe", false)
	require.NoError(t, err)
	require.Equal(t, dry, done)
	require.Equal(t, 1, held(), "another namespace keeps its rows")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM erase_probe WHERE customer = 'cus_B'`))
	require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM erase_probe WHERE customer = $1`, ledger.Erased))

	_, err = h.Claimer.EraseModules(ctx, h.Registry, "", "", true)
	require.Error(t, err, "an empty subject matches everything")
	none, err := h.Claimer.EraseModules(ctx, ledger.NewRegistry(), "cus_A", "", false)
	require.NoError(t, err)
	require.Empty(t, none)
}
