package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
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

// TestEraseLeavesARowARequeueMovedMeanwhile: a requeue of a settled row
// holding the subject commits while erase waits for the row's lock. The
// erase's guard is checked again on the row's newest version, so the row
// stays claimed with its payload for its apply, and erase reports it as
// still to be applied (what its statement changed), not as erased.
func TestEraseLeavesARowARequeueMovedMeanwhile(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	h.Claim(t, "stripe", "evt_moved", "x", []byte(`{"customer":"cus_moved"}`))
	h.Claim(t, "stripe", "evt_still", "x", []byte(`{"customer":"cus_moved"}`))
	_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET status = 'settled'`)
	require.NoError(t, err)

	// The requeue holds the row's lock and has set it back to claimed.
	requeue, err := h.DB.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer requeue.Rollback() //nolint:errcheck
	_, err = requeue.Exec(`UPDATE webhook_event SET status = 'claimed' WHERE event_id = 'evt_moved'`)
	require.NoError(t, err)

	type result struct {
		r   ledger.EraseReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := h.Claimer.Erase(ctx, "cus_moved", "", false)
		done <- result{r, err}
	}()
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%UPDATE webhook_event e SET payload%'`) == 1
	}, "erase waits for the requeue's row lock")
	require.NoError(t, requeue.Commit())
	got := <-done
	require.NoError(t, got.err)

	require.Equal(t, []string{"evt_still"}, eraseIDs(got.r.Rows), "only the row the statement changed is erased")
	require.Equal(t, []string{"evt_moved"}, eraseIDs(got.r.Pending))
	require.Equal(t, "claimed", got.r.Pending[0].Status, "reported as the row is now")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_moved'
		AND status = 'claimed' AND erased_at IS NULL AND payload = '{"customer":"cus_moved"}'`))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_still' AND erased_at IS NOT NULL`))
}

// TestEraseLeavesTheSubjectNowhere: an event whose handler's error quoted
// the subject failed for good and was discarded with a reason naming it;
// after erase no column of its ledger row (payload, headers, last error,
// failure history, discard reason) and no River job row (args, errors)
// holds the subject, and the subject is recorded by its digest alone.
func TestEraseLeavesTheSubjectNowhere(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "poison.*", func(_ context.Context, _ *ledger.Tx, ev *ledger.Event) error {
			return ledger.Permanent(fmt.Errorf("no plan for customer %s", "cus_Everywhere"))
		})
	})
	ctx := context.Background()
	h.Claim(t, "stripe", "evt_poison", "poison.created", []byte(`{"customer":"cus_Everywhere"}`))
	dbtest.Eventually(t, func() bool {
		return h.Row(t, "stripe", "evt_poison").Status == "failed" &&
			h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND state = 'cancelled'`) == 1
	})
	_, err := h.Claimer.Discard(ctx, "stripe", "evt_poison", "customer cus_Everywhere left")
	require.NoError(t, err)
	holding := func() int {
		return h.DB.Count(t, `SELECT count(*) FROM webhook_event e WHERE strpos(e::text, 'cus_Everywhere') > 0`) +
			h.DB.Count(t, `SELECT count(*) FROM river_job j WHERE strpos(j::text, 'cus_Everywhere') > 0`)
	}
	require.Equal(t, 2, holding(), "the row and its job hold it")

	done, err := h.Claimer.Erase(ctx, "cus_Everywhere", "", false)
	require.NoError(t, err)
	require.Equal(t, []string{"evt_poison"}, eraseIDs(done.Rows))
	require.Zero(t, holding())
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE failure_log->0->>'error' = $1
		AND last_error = $1 AND discard_reason = $1`, ledger.Erased), "the history keeps its entry, redacted")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND errors[1]->>'error' = $1`, ledger.Erased))

	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM erased_subject WHERE namespace = '' AND digest = $1`, ledger.SubjectDigest("cus_Everywhere")))
	found, err := h.Claimer.ErasedIn(ctx, "stripe", []byte(`{"data":{"customer":"cus_Everywhere","other":"cus_Kept"}}`))
	require.NoError(t, err)
	require.Equal(t, []string{"cus_Everywhere"}, found)
	found, err = ledger.ErasedIn(ctx, h.DB.SQL, "github", []byte(`["cus_Kept"]`))
	require.NoError(t, err)
	require.Empty(t, found)
}
