package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// riverJob is the River row of the event's own apply job.
type riverJob struct {
	State   string
	Attempt int
	Errors  []map[string]any
	Waits   bool // scheduled_at is in the future
}

func ownJob(t *testing.T, h *ledgertest.Harness, id string) riverJob {
	t.Helper()
	var (
		j    riverJob
		errs []byte
	)
	require.NoError(t, h.DB.SQL.QueryRow(`
		SELECT state, attempt, COALESCE(to_jsonb(errors), '[]'::jsonb), scheduled_at > now()
		FROM river_job WHERE kind = 'apply_event' AND args->>'event_id' = $1 ORDER BY id DESC LIMIT 1`, id).
		Scan(&j.State, &j.Attempt, &errs, &j.Waits))
	require.NoError(t, json.Unmarshal(errs, &j.Errors))
	return j
}

// failureLog is the row's failure log.
func failureLog(t *testing.T, h *ledgertest.Harness, id string) []ledger.Failure {
	t.Helper()
	var raw []byte
	require.NoError(t, h.DB.SQL.QueryRow(`SELECT COALESCE(failure_log, '[]'::jsonb) FROM webhook_event WHERE event_id = $1`, id).Scan(&raw))
	var log []ledger.Failure
	require.NoError(t, json.Unmarshal(raw, &log))
	return log
}

func handlersOf(t *testing.T, h *ledgertest.Harness, id string) string {
	t.Helper()
	var s *string
	require.NoError(t, h.DB.SQL.QueryRow(`SELECT handlers::text FROM webhook_event WHERE event_id = $1`, id).Scan(&s))
	if s == nil {
		return "NULL"
	}
	return *s
}

// TestHandlerFailureIsARiverError: a handler's error is the apply job's
// River error: retryable, with the attempt and the handler's name in its
// errors, its next try scheduled; the row is failed with the same text and
// a failure log that survives the fix.
func TestHandlerFailureIsARiverError(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(context.Context, *ledger.Tx, *ledger.Event) error {
			if fail.Load() {
				return errors.New("card network down")
			}
			return nil
		})
	})
	h.Claim(t, "stripe", "evt_vis", "invoice.paid", []byte(`{}`))
	var job riverJob
	dbtest.Eventually(t, func() bool {
		job = ownJob(t, h, "evt_vis")
		return job.State == "retryable" && len(job.Errors) >= 1
	}, "the job never became retryable")
	require.Equal(t, float64(1), job.Errors[0]["attempt"])
	require.Contains(t, job.Errors[0]["error"], "ledger_test.TestHandlerFailureIsARiverError.func1.1: card network down")
	require.GreaterOrEqual(t, job.Attempt, 1)

	row := h.Row(t, "stripe", "evt_vis")
	require.Equal(t, "failed", row.Status)
	require.Equal(t, job.Errors[len(job.Errors)-1]["error"], row.LastError.String, "River and the ledger say the same")
	log := failureLog(t, h, "evt_vis")
	require.NotEmpty(t, log)
	require.Equal(t, "ledger_test.TestHandlerFailureIsARiverError.func1.1", log[0].Handler)
	require.Equal(t, 1, log[0].Attempt)
	require.NotZero(t, log[0].JobID)
	require.Equal(t, "NULL", handlersOf(t, h, "evt_vis"), "never applied")

	found, err := store(h).FindJob(context.Background(), "stripe", "evt_vis")
	require.NoError(t, err)
	require.Contains(t, []string{"retryable", "available", "running"}, found.State)
	require.Equal(t, ledger.ApplyMaxAttempts, found.MaxAttempts)

	fail.Store(false)
	_, err = store(h).Requeue(context.Background(), "stripe", "evt_vis", false)
	require.NoError(t, err)
	h.WaitSettled(t, "stripe", "evt_vis")
	require.NotEmpty(t, failureLog(t, h, "evt_vis"), "the failures outlive the recovery")
	require.Equal(t, `["ledger_test"]`, handlersOf(t, h, "evt_vis"))
	require.Equal(t, "completed", ownJob(t, h, "evt_vis").State)
}

// TestUnhandledRecordsNoHandlers: an event no handler matches settles with
// an empty list of handlers; one that is handled names its modules.
func TestUnhandledRecordsNoHandlers(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.*", func(context.Context, *ledger.Tx, *ledger.Event) error { return nil })
	})
	h.Claim(t, "stripe", "evt_none", "customer.created", []byte(`{}`))
	h.Claim(t, "stripe", "evt_some", "invoice.paid", []byte(`{}`))
	h.WaitSettled(t, "stripe", "evt_none")
	h.WaitSettled(t, "stripe", "evt_some")
	require.Equal(t, `[]`, handlersOf(t, h, "evt_none"))
	require.Equal(t, `["ledger_test"]`, handlersOf(t, h, "evt_some"))
}

// TestStatementTimeoutInHandlerIsAHandlerFailure: a handler statement cut
// off by statement_timeout, while the database answers, is the handler's
// failure: recorded and retried by River, not taken for an outage.
func TestStatementTimeoutInHandlerIsAHandlerFailure(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(ctx context.Context, tx *ledger.Tx, _ *ledger.Event) error {
			if _, err := tx.ExecContext(ctx, `SET LOCAL statement_timeout = '50ms'`); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `SELECT pg_sleep(1)`)
			return err
		})
	})
	h.Claim(t, "stripe", "evt_slow", "invoice.paid", []byte(`{}`))
	requireHandlerFailure(t, h, "evt_slow", "statement timeout")
}

// TestLostConnectionInHandlerIsAHandlerFailure: a handler whose connection
// dies under it, while the database answers, fails like any handler.
func TestLostConnectionInHandlerIsAHandlerFailure(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(ctx context.Context, tx *ledger.Tx, _ *ledger.Event) error {
			_, err := tx.ExecContext(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
			return err
		})
	})
	h.Claim(t, "stripe", "evt_cut", "invoice.paid", []byte(`{}`))
	requireHandlerFailure(t, h, "evt_cut", "terminat")
}

func requireHandlerFailure(t *testing.T, h *ledgertest.Harness, id, says string) {
	t.Helper()
	var job riverJob
	dbtest.Eventually(t, func() bool {
		job = ownJob(t, h, id)
		return len(job.Errors) >= 1
	}, "no River error recorded for %s (state %s)", id, job.State)
	require.Contains(t, job.Errors[0]["error"], says)
	row := h.Row(t, "stripe", id)
	require.Equal(t, "failed", row.Status)
	require.GreaterOrEqual(t, row.Attempts, 1)
	require.Contains(t, row.LastError.String, says)
}

// TestDiscardPutsAFailedEventAway: a discarded event leaves the backlog,
// its job is cancelled, the stats count it, and a requeue brings it back.
func TestDiscardPutsAFailedEventAway(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(context.Context, *ledger.Tx, *ledger.Event) error {
			if fail.Load() {
				return ledger.Permanent(errors.New("poison"))
			}
			return nil
		})
	})
	ctx := context.Background()
	h.Claim(t, "stripe", "evt_poison", "invoice.paid", []byte(`{}`))
	waitRow(t, h, "evt_poison", "failed", func(r ledgertest.Row) bool { return r.Status == "failed" })
	dbtest.Eventually(t, func() bool { return ownJob(t, h, "evt_poison").State == "cancelled" }, "a permanent failure cancels the job")

	_, err := store(h).Discard(ctx, "stripe", "evt_poison", " ")
	require.ErrorIs(t, err, ledger.ErrNoReason)
	ev, err := store(h).Discard(ctx, "stripe", "evt_poison", "customer deleted; refunded by hand")
	require.NoError(t, err)
	require.Equal(t, "discarded", string(ev.Status))
	require.Equal(t, "customer deleted; refunded by hand", *ev.DiscardReason)

	b, err := store(h).Backlog(ctx)
	require.NoError(t, err)
	require.Zero(t, b.Claimed+b.Failed)
	require.Zero(t, b.Oldest)
	counts, _, err := store(h).CountByStatus(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, counts["discarded"])

	_, err = store(h).Discard(ctx, "stripe", "evt_missing", "x")
	require.ErrorIs(t, err, ledger.ErrNotFound)

	fail.Store(false)
	_, err = store(h).Requeue(ctx, "stripe", "evt_poison", false)
	require.NoError(t, err)
	h.WaitSettled(t, "stripe", "evt_poison")
	_, err = store(h).Discard(ctx, "stripe", "evt_poison", "too late")
	require.ErrorIs(t, err, ledger.ErrNotDiscardable)
}

// TestDiscardCancelsAPendingRetry: discarding an event whose retry is
// pending cancels River's job, and a late failure of that event leaves the
// row discarded.
func TestDiscardCancelsAPendingRetry(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(context.Context, *ledger.Tx, *ledger.Event) error {
			return errors.New("still down")
		})
	})
	ctx := context.Background()
	h.Claim(t, "stripe", "evt_retry", "invoice.paid", []byte(`{}`))
	dbtest.Eventually(t, func() bool { return ownJob(t, h, "evt_retry").State == "retryable" })
	var err error
	dbtest.Eventually(t, func() bool {
		_, err = store(h).Discard(ctx, "stripe", "evt_retry", "upstream retired")
		return !errors.Is(err, ledger.ErrBeingApplied)
	})
	require.NoError(t, err)
	require.Equal(t, "cancelled", ownJob(t, h, "evt_retry").State)
	require.Equal(t, "discarded", h.Row(t, "stripe", "evt_retry").Status)
}

// TestForcedReapplyKeepsTheFirstSettle: a forced re-apply of an old event
// leaves its settled_at alone, so apply latency stays the first settle's.
func TestForcedReapplyKeepsTheFirstSettle(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	h.Claim(t, "stripe", "evt_old", "invoice.paid", []byte(`{}`))
	require.NoError(t, h.Apply(t, "stripe", "evt_old", false))
	_, err := h.DB.SQL.Exec(`UPDATE webhook_event SET received_at = now() - interval '2 hours', settled_at = now() - interval '2 hours' + interval '1 second'`)
	require.NoError(t, err)
	require.NoError(t, h.Apply(t, "stripe", "evt_old", true))
	require.Equal(t, 1, h.DB.Count(t, `SELECT extract(epoch FROM settled_at - received_at)::int FROM webhook_event`), "latency 1 s, not 2 h")
	require.Equal(t, 2, h.Row(t, "stripe", "evt_old").Attempts)
}
