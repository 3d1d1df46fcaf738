package ledger_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// liveJobs counts the live apply jobs that carry the stripe event id (its
// own, and unfinished batches that hold it).
func liveJobs(t *testing.T, h *ledgertest.Harness, id string) int {
	t.Helper()
	return h.DB.Count(t, ledger.LiveJobsSQL, "stripe", id)
}

// TestLifecycleDocsShowTheTable: docs/failures.md shows the transition
// table as the ledger has it.
func TestLifecycleDocsShowTheTable(t *testing.T) {
	t.Parallel()
	doc := readDoc(t, "docs/failures.md")
	require.True(t, strings.Contains(doc, ledger.LifecycleMarkdown()),
		"docs/failures.md shows the table: put ledger.LifecycleMarkdown() in it:\n%s", ledger.LifecycleMarkdown())
}

// TestLogOnlyNeverAppliesADiscardedEvent: under CLAIM_MODE=log-only, a
// redelivery of an event an operator discarded (a poison payload) is a
// duplicate like any other, and applies nothing: no job, no handler call,
// the row stays discarded, even once the handler would succeed.
func TestLogOnlyNeverAppliesADiscardedEvent(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	var fail atomic.Bool
	fail.Store(true)
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(context.Context, *ledger.Tx, *ledger.Event) error {
			calls.Add(1)
			if fail.Load() {
				return errors.New("poison")
			}
			return nil
		})
	})
	ctx := context.Background()
	logOnly := ledger.NewStore(h.DB.SQL, h.River, ledger.StoreOptions{LogOnly: true})
	claim := ledger.Claim{Namespace: "stripe", EventID: "evt_poison", Provider: "stripe", Source: "stripe", Type: "invoice.paid", Payload: []byte(`{}`)}
	res, err := logOnly.Claim(ctx, claim)
	require.NoError(t, err)
	require.Equal(t, ledger.Claimed, res)
	waitRow(t, h, "evt_poison", "failed", func(r ledgertest.Row) bool { return r.Status == "failed" })
	_, err = store(h).Discard(ctx, "stripe", "evt_poison", "poison payload")
	require.NoError(t, err)
	// A run that had started when it was discarded passes it by.
	dbtest.Eventually(t, func() bool { return liveJobs(t, h, "evt_poison") == 0 }, "its job ends")
	before := calls.Load()

	res, err = logOnly.Claim(ctx, claim)
	require.NoError(t, err)
	require.True(t, res.WouldSkip(), "a log-only duplicate (got %v)", res)
	require.Zero(t, liveJobs(t, h, "evt_poison"), "no job applies a discarded event")
	fail.Store(false)
	res, err = logOnly.Claim(ctx, claim)
	require.NoError(t, err)
	require.Zero(t, liveJobs(t, h, "evt_poison"))
	require.Equal(t, "discarded", h.Row(t, "stripe", "evt_poison").Status)
	require.Equal(t, before, calls.Load(), "the handler never ran again")
}

// TestForcedJobSkipsADiscardedEvent: a forced apply job that meets a
// discarded row (one a log-only duplicate or a forced requeue queued
// before the discard) skips it and completes: it never applies it and
// never snoozes in a loop.
func TestForcedJobSkipsADiscardedEvent(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(context.Context, *ledger.Tx, *ledger.Event) error {
			calls.Add(1)
			return errors.New("poison")
		})
	})
	ctx := context.Background()
	h.Claim(t, "stripe", "evt_p", "invoice.paid", []byte(`{}`))
	_, err := store(h).Discard(ctx, "stripe", "evt_p", "poison")
	require.NoError(t, err)
	_, err = h.River.Insert(ctx, ledger.ApplyArgs{Namespace: "stripe", EventID: "evt_p", Force: true}, nil)
	require.NoError(t, err)
	startWorker(t, h, ledger.RiverOptions{})
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM river_job WHERE args @> '{"force": true}' AND state = 'completed'`) == 1
	}, "the forced job completes")
	require.Zero(t, calls.Load())
	require.Equal(t, "discarded", h.Row(t, "stripe", "evt_p").Status)
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE (metadata->>'snoozes')::int > 0`), "never snoozed")
}

// TestRequeueResetsRiversAttempts: a requeue of an event River gave up on
// starts its job from attempt 0 with a whole budget, so its next retry
// after a failure is a second away (not an hour) and River UI shows the
// ledger's story (1/84, not 31/114).
func TestRequeueResetsRiversAttempts(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	h.Claim(t, "stripe", "evt_gaveup", "invoice.paid", []byte(`{}`))
	_, err := h.DB.SQL.Exec(`UPDATE river_job SET state = 'discarded', attempt = 30, max_attempts = 30, attempted_at = now(), finalized_at = now();
		UPDATE webhook_event SET status = 'failed', attempts = 30, failures = 30`)
	require.NoError(t, err)
	res, err := store(h).Requeue(ctx, "stripe", "evt_gaveup", false)
	require.NoError(t, err)
	require.Equal(t, ledger.RequeueRequeued, res)
	var attempt, maxAttempts int
	var state string
	require.NoError(t, h.DB.SQL.QueryRow(`SELECT attempt, max_attempts, state FROM river_job`).Scan(&attempt, &maxAttempts, &state))
	require.Equal(t, "available", state)
	require.Equal(t, 0, attempt, "River's attempt count starts again")
	require.Equal(t, ledger.ApplyMaxAttempts, maxAttempts)
}

// TestDiscardNeverWaitsOnAJobLock: a discard while an apply holds the
// event's job (an apply that absorbed it, before it reaches the ledger
// row) does not wait for that lock, so the two cannot deadlock: it
// answers that the event is being applied and changes nothing; once the
// apply ends, the discard goes through.
func TestDiscardNeverWaitsOnAJobLock(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	h.Claim(t, "stripe", "evt_absorbed", "invoice.paid", []byte(`{}`))
	apply, err := h.DB.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer apply.Rollback() //nolint:errcheck
	_, err = apply.Exec(`SELECT id FROM river_job FOR UPDATE`)
	require.NoError(t, err)

	dctx, cancel := context.WithTimeout(ctx, dbtest.Patience)
	defer cancel()
	_, err = store(h).Discard(dctx, "stripe", "evt_absorbed", "customer deleted")
	require.ErrorIs(t, err, ledger.ErrBeingApplied)
	require.Equal(t, "claimed", h.Row(t, "stripe", "evt_absorbed").Status, "nothing changed")
	// The apply reaches the row without waiting for the discard.
	_, err = apply.Exec(`SELECT id FROM webhook_event FOR UPDATE NOWAIT`)
	require.NoError(t, err)
	require.NoError(t, apply.Rollback())

	_, err = store(h).Discard(ctx, "stripe", "evt_absorbed", "customer deleted")
	require.NoError(t, err)
	require.Equal(t, "discarded", h.Row(t, "stripe", "evt_absorbed").Status)
	require.Zero(t, liveJobs(t, h, "evt_absorbed"))
}

// TestFailedForcedReapplyStaysSettled: a forced re-apply of a settled
// event that fails leaves the row settled (its first settled_at kept),
// with the failure in its history; discard and erase still see an
// applied event.
func TestFailedForcedReapplyStaysSettled(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(context.Context, *ledger.Tx, *ledger.Event) error {
			if fail.Load() {
				return errors.New("mail server down")
			}
			return nil
		})
	})
	ctx := context.Background()
	h.Claim(t, "stripe", "evt_s", "invoice.paid", []byte(`{}`))
	h.WaitSettled(t, "stripe", "evt_s")
	var settledAt time.Time
	require.NoError(t, h.DB.SQL.QueryRow(`SELECT settled_at FROM webhook_event`).Scan(&settledAt))

	fail.Store(true)
	res, err := store(h).Requeue(ctx, "stripe", "evt_s", true)
	require.NoError(t, err)
	require.Equal(t, ledger.RequeueRequeued, res)
	dbtest.Eventually(t, func() bool {
		return len(failureLog(t, h, "evt_s")) > 0
	}, "the forced re-apply's failure is in the history")
	row := h.Row(t, "stripe", "evt_s")
	require.Equal(t, "settled", row.Status, "an applied event stays applied")
	var after time.Time
	require.NoError(t, h.DB.SQL.QueryRow(`SELECT settled_at FROM webhook_event`).Scan(&after))
	require.True(t, settledAt.Equal(after), "its first settled_at is kept")
	require.Contains(t, failureLog(t, h, "evt_s")[0].Error, "mail server down")
	_, err = store(h).Discard(ctx, "stripe", "evt_s", "x")
	require.ErrorIs(t, err, ledger.ErrNotDiscardable, "discard still sees an applied event")
}

// TestRequeueOfDiscardedEventInARunningBatch: a requeue of a discarded
// event whose batch job is running right now (the batch skipped it) is
// applied: the running batch does not count as the work that will apply
// it.
func TestRequeueOfDiscardedEventInARunningBatch(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	var applied atomic.Int32
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(_ context.Context, _ *ledger.Tx, ev *ledger.Event) error {
			if ev.EventID == "evt_slow" {
				close(entered)
				<-release
			}
			if ev.EventID == "evt_put_away" {
				applied.Add(1)
			}
			return nil
		})
	})
	ctx := context.Background()
	insertBatch(t, h, "invoice.paid", "evt_slow", "evt_put_away")
	_, err := store(h).Discard(ctx, "stripe", "evt_put_away", "not ours")
	require.NoError(t, err)
	startWorker(t, h, ledger.RiverOptions{})
	<-entered

	res, err := store(h).Requeue(ctx, "stripe", "evt_put_away", false)
	require.NoError(t, err)
	require.Equal(t, ledger.RequeueRequeued, res)
	close(release)
	h.WaitSettled(t, "stripe", "evt_slow")
	h.WaitSettled(t, "stripe", "evt_put_away")
	require.Equal(t, int32(1), applied.Load())
}

// readDoc reads a file of the repository's docs.
func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", path))
	require.NoError(t, err)
	return strings.ReplaceAll(string(b), "\r\n", "\n")
}

// TestEraseWaitsForAJobStillRunning: a discarded event whose apply job is
// still running (a discard cancels a job mid-run; River writes the run's
// error, which may quote the subject, when it ends) is reported pending,
// not erased; once the job has ended, erase takes the row and the error
// River wrote.
func TestEraseWaitsForAJobStillRunning(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	ctx := context.Background()
	h.Claim(t, "stripe", "evt_running", "invoice.paid", []byte(`{"customer":"cus_Running"}`))
	_, err := store(h).Discard(ctx, "stripe", "evt_running", "customer left")
	require.NoError(t, err)
	_, err = h.DB.SQL.Exec(`UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), finalized_at = NULL WHERE args->>'event_id' = 'evt_running'`)
	require.NoError(t, err)

	r, err := store(h).Erase(ctx, "cus_Running", "", false)
	require.NoError(t, err)
	require.Empty(t, r.Rows)
	require.Len(t, r.Pending, 1, "a row whose job still runs waits")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE erased_at IS NULL AND payload LIKE '%cus_Running%'`))

	// The run ends with an error that quotes the subject.
	_, err = h.DB.SQL.Exec(`UPDATE river_job SET state = 'cancelled', finalized_at = now(),
		errors = ARRAY[jsonb_build_object('attempt', 1, 'at', now(), 'error', 'customer cus_Running: card declined', 'trace', '')]
		WHERE args->>'event_id' = 'evt_running'`)
	require.NoError(t, err)
	r, err = store(h).Erase(ctx, "cus_Running", "", false)
	require.NoError(t, err)
	require.Len(t, r.Rows, 1)
	require.Empty(t, r.Pending)
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE array_to_string(errors, ' ') LIKE '%cus_Running%'`))
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE payload LIKE '%cus_Running%'`))
}
