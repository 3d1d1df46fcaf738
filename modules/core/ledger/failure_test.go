package ledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/zap"
)

// insertBatch inserts ledger rows for ids and one apply_batch job for all of
// them, as a group commit does.
func insertBatch(t *testing.T, h *ledgertest.Harness, typ string, ids ...string) []ledger.EventKey {
	t.Helper()
	events := make([]ledgertest.BatchEvent, len(ids))
	for i, id := range ids {
		events[i] = ledgertest.BatchEvent{ID: id, Type: typ, Payload: []byte("{}")}
	}
	return h.InsertBatch(t, "stripe", events...)
}

// waitRow polls the event's ledger row until cond holds.
func waitRow(t *testing.T, h *ledgertest.Harness, id string, what string, cond func(ledgertest.Row) bool) ledgertest.Row {
	t.Helper()
	var row ledgertest.Row
	dbtest.Eventually(t, func() bool { row = h.Row(t, "stripe", id); return cond(row) },
		"%s never became %s (last: %+v)", id, what, row)
	return row
}

// TestPanicInBatchSplitsIt: a handler that panics on one event of a batch is
// a failure like any other: the batch splits, the panicking event is failed
// with the panic text and a retry of its own, and its siblings settle.
func TestPanicInBatchSplitsIt(t *testing.T) {
	t.Parallel()
	var panics atomic.Int32
	h := ledgertest.New(t, 2, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(_ context.Context, _ *ledger.Tx, ev *ledger.Event) error {
			if ev.EventID == "evt_panic" {
				panics.Add(1)
				panic("nil map in handler")
			}
			return nil
		})
	})
	insertBatch(t, h, "invoice.paid", "evt_sib_a", "evt_panic", "evt_sib_b")
	h.WaitSettled(t, "stripe", "evt_sib_a")
	h.WaitSettled(t, "stripe", "evt_sib_b")
	// Its retries go on (the handler always panics) in a job of its own:
	// the batch's panic split the batch and recorded nothing.
	row := waitRow(t, h, "evt_panic", "failed in its own job", func(r ledgertest.Row) bool {
		return r.Status == "failed" && r.Attempts >= 1
	})
	require.Contains(t, row.LastError.String, "ledger_test.TestPanicInBatchSplitsIt.func1.1: panic: nil map in handler")
	require.Contains(t, row.LastError.String, "failure_test.go:", "with the handler's frames")
	require.NotContains(t, row.LastError.String, "runHandler", "and none of the apply loop's")

	requireOwnRetry(t, h, "evt_panic")
}

// requireOwnRetry checks that a failed event of a split batch has a job of
// its own, with a retry pending.
func requireOwnRetry(t *testing.T, h *ledgertest.Harness, id string) {
	t.Helper()
	job, err := store(h).FindJob(context.Background(), "stripe", id)
	require.NoError(t, err)
	require.NotNil(t, job)
	var kind string
	require.NoError(t, h.DB.SQL.QueryRow(`SELECT kind FROM river_job WHERE kind <> 'ledger_sweep' AND id = $1`, job.ID).Scan(&kind))
	require.Equal(t, "apply_event", kind, "the failing event has a job of its own")
	require.Contains(t, []string{"scheduled", "retryable", "available", "running"}, job.State, "and a retry is pending")
}

// TestHandlerNetworkErrorBacksOff: a handler's own network failure is not a
// database outage: it backs off like any handler failure.
func TestHandlerNetworkErrorBacksOff(t *testing.T) {
	t.Parallel()
	// A server that drops every connection it accepts: each call fails at
	// once. (A closed port could be taken by another process meanwhile.)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	deadURL := "http://" + ln.Addr().String()
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(ctx context.Context, _ *ledger.Tx, ev *ledger.Event) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, deadURL, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("call billing API: %w", err)
			}
			resp.Body.Close()
			return nil
		})
	})
	h.Claim(t, "stripe", "evt_net", "invoice.paid", []byte(`{}`))
	row := waitRow(t, h, "evt_net", "failed three times", func(r ledgertest.Row) bool { return r.Status == "failed" && r.Attempts >= 3 })
	require.NotContains(t, row.LastError.String, "database unavailable")
	require.Contains(t, row.LastError.String, "call billing API")
	// After the third failure the next try waits RetryDelay(3), at least 4 s.
	var wait time.Duration
	dbtest.Eventually(t, func() bool {
		// The row first: a job waiting for its next try after it holds the
		// schedule of the third failure or a later one.
		if h.Row(t, "stripe", "evt_net").Attempts < 3 {
			return false
		}
		var attempted, scheduled time.Time
		err := h.DB.SQL.QueryRow(`SELECT attempted_at, scheduled_at FROM river_job WHERE kind = 'apply_event' AND state IN ('available', 'scheduled', 'retryable') AND attempted_at IS NOT NULL`).Scan(&attempted, &scheduled)
		if err != nil {
			return false
		}
		wait = scheduled.Sub(attempted)
		return true
	})
	require.GreaterOrEqual(t, wait, 4*time.Second, "backs off RetryDelay(3) or longer: the next try is not due within seconds")
}

// TestOutageIsNotAnAttempt: when the worker cannot reach its own database,
// the job is snoozed, not failed: no attempt is spent on it.
func TestOutageIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	dead, err := sql.Open("pgx", "postgres://postgres@"+addr+"/postgres?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	defer dead.Close()
	w := &ledger.ApplyWorker{Applier: &ledger.Applier{DB: dead, Registry: ledger.NewRegistry(), Logger: zap.NewNop(), Metrics: metrics.New()}}
	err = w.Work(context.Background(), &river.Job[ledger.ApplyArgs]{
		JobRow: &rivertype.JobRow{ID: 1, Attempt: 1, Kind: "apply_event"},
		Args:   ledger.ApplyArgs{Namespace: "stripe", EventID: "evt_outage"},
	})
	var snooze *rivertype.JobSnoozeError
	require.ErrorAs(t, err, &snooze, "an outage snoozes the job: %v", err)
}

// TestApplyAttemptsSpanTheHorizon: the apply job's attempt budget is
// River's whole retry policy: its backoff first spans RetryHorizon on
// the last attempt, and the claim's job carries it.
func TestApplyAttemptsSpanTheHorizon(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	h.Claim(t, "stripe", "evt_budget", "invoice.paid", []byte(`{}`))
	require.Equal(t, ledger.ApplyMaxAttempts, h.DB.Count(t, `SELECT max_attempts FROM river_job WHERE kind <> 'ledger_sweep'`), "the claim's job carries the apply budget")
	var waits time.Duration
	for n := 1; n < ledger.ApplyMaxAttempts; n++ {
		require.LessOrEqual(t, waits, ledger.RetryHorizon, "attempt %d comes before the horizon", n)
		waits += ledger.RetryBase(n)
	}
	require.GreaterOrEqual(t, waits, ledger.RetryHorizon, "the last attempt comes after the horizon")
	require.Less(t, ledger.ApplyMaxAttempts, 100, "a budget a person reads")
}

// TestForceRequeueReachesEveryBatchSibling: a forced requeue of events that
// were claimed and applied together re-applies each of them exactly once,
// even while a job that holds some of them is running.
func TestForceRequeueReachesEveryBatchSibling(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	applied := map[string]int{}
	entered, gate := make(chan struct{}, 1), make(chan struct{})
	h := ledgertest.New(t, 2, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(_ context.Context, _ *ledger.Tx, ev *ledger.Event) error {
			mu.Lock()
			applied[ev.EventID]++
			n := applied[ev.EventID]
			mu.Unlock()
			if ev.EventID == "evt_sib_00" && n == 2 {
				entered <- struct{}{}
				<-gate // the fixed handler is slow: its re-apply is still running
			}
			return nil
		})
	})
	var ids []string
	for i := range 20 {
		ids = append(ids, fmt.Sprintf("evt_sib_%02d", i))
	}
	insertBatch(t, h, "invoice.paid", ids...)
	for _, id := range ids {
		h.WaitSettled(t, "stripe", id)
	}
	ctx := context.Background()
	_, err := store(h).Requeue(ctx, "stripe", "evt_sib_00", true)
	require.NoError(t, err)
	select {
	case <-entered:
	case <-time.After(dbtest.Patience):
		t.Fatal("the forced re-apply never ran")
	}
	res, err := store(h).RequeueMatching(ctx, ledger.Filter{Status: "settled", Type: "invoice.paid"}, true, false)
	close(gate)
	require.NoError(t, err)
	require.Equal(t, 19, res.Requeued, "%+v", res)
	require.Equal(t, 1, res.Pending, "%+v", res)
	dbtest.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if applied[id] < 2 {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		h.WaitSettled(t, "stripe", id)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 2, applied[id], "%s applied once, then once forced", id)
	}
}

// TestFailureNeverOverwritesACommit: a failure recorded after an apply that
// did commit (the client saw an error on COMMIT) leaves the settle alone,
// forced or not.
func TestFailureNeverOverwritesACommit(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	h.Claim(t, "stripe", "evt_commit", "invoice.paid", []byte(`{}`))
	require.NoError(t, h.Apply(t, "stripe", "evt_commit", false))
	before := h.Row(t, "stripe", "evt_commit")
	// The forced attempt saw attempts=1 before it ran; it committed (2) and
	// then its client was told the commit failed.
	require.NoError(t, h.Apply(t, "stripe", "evt_commit", true))
	require.NoError(t, ledger.RecordFailure(context.Background(), h.DB.SQL,
		ledger.Attempt{Key: ledger.EventKey{Namespace: "stripe", EventID: "evt_commit"}, Seen: before.Attempts}, ledger.Failure{Error: "commit: connection reset"}))
	row := h.Row(t, "stripe", "evt_commit")
	require.Equal(t, "settled", row.Status)
	require.Equal(t, 2, row.Attempts)
}

// TestShutdownIsNotAFailure: a graceful stop that cancels a running apply
// puts the job back without a failure on the row.
func TestShutdownIsNotAFailure(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(ctx context.Context, _ *ledger.Tx, _ *ledger.Event) error {
			entered <- struct{}{}
			<-ctx.Done()
			return fmt.Errorf("call upstream: %w", ctx.Err())
		})
	})
	h.Claim(t, "stripe", "evt_stop", "invoice.paid", []byte(`{}`))
	select {
	case <-entered:
	case <-time.After(dbtest.Patience):
		t.Fatal("handler never ran")
	}
	ctx, cancel := context.WithTimeout(context.Background(), dbtest.Patience)
	defer cancel()
	require.NoError(t, h.River.StopAndCancel(ctx))
	row := h.Row(t, "stripe", "evt_stop")
	require.Equal(t, "claimed", row.Status)
	require.Zero(t, row.Attempts)
	require.False(t, row.LastError.Valid)
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND state = 'available'`), "back in the queue, now")
}

// TestFailureReasonCutOnARune: a long multi-byte reason is cut where
// PostgreSQL still accepts it.
func TestFailureReasonCutOnARune(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	h.Claim(t, "stripe", "evt_rune", "invoice.paid", []byte(`{}`))
	reason := strings.Repeat("€", 3000)
	require.NoError(t, ledger.RecordFailure(context.Background(), h.DB.SQL,
		ledger.Attempt{Key: ledger.EventKey{Namespace: "stripe", EventID: "evt_rune"}, Seen: -1}, ledger.Failure{Error: reason}))
	row := h.Row(t, "stripe", "evt_rune")
	require.Equal(t, "failed", row.Status)
	require.True(t, utf8.ValidString(row.LastError.String))
	require.Equal(t, strings.Repeat("€", 4000/len("€")), row.LastError.String, "cut after the last whole rune within 4000 bytes")
}

// TestGoneEventEndsItsJob: an apply job whose ledger row was deleted ends
// (cancelled) instead of retrying forever.
func TestGoneEventEndsItsJob(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 1, nil)
	_, err := h.River.Insert(context.Background(), ledger.ApplyArgs{Namespace: "stripe", EventID: "evt_gone"}, nil)
	require.NoError(t, err)
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND state = 'cancelled'`) == 1
	})
}
