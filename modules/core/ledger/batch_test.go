package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

func newBatcher(t *testing.T, h *ledgertest.Harness, committers int) *ledger.Batcher {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ledger.NewBatcher(ctx, h.Claimer, committers, 256)
}

// waitLockWaiter waits until a committer's transaction waits on a lock the
// test holds.
func waitLockWaiter(t *testing.T, h *ledgertest.Harness) {
	t.Helper()
	require.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) >= 1
	}, dbtest.Patience, 5*time.Millisecond, "no committer waits on the lock")
}

// waitQueued waits until n requests wait for a committer.
func waitQueued(t *testing.T, b *ledger.Batcher, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return b.Queued() == n }, dbtest.Patience, 5*time.Millisecond, "requests never queued")
}

func TestBatcherClaimsEachEventOnce(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	b := newBatcher(t, h, 2)
	var claimed atomic.Int32
	var wg sync.WaitGroup
	for i := range 100 {
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), dbtest.Patience)
				defer cancel()
				ok, err := b.Claim(ctx, claimOf(fmt.Sprintf("evt_b%d", i), "invoice.paid"))
				if err != nil {
					t.Error(err) // reported from this goroutine; require stops only the test's own
					return
				}
				if ok {
					claimed.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	require.Equal(t, int32(100), claimed.Load(), "one claim per event")
	require.Equal(t, 100, h.DB.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Equal(t, 100, h.DB.Count(t, ledgertest.JobCoverageSQL), "one job per event")
	require.Positive(t, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_batch'`), "events claimed together are applied together")
	require.Positive(t, b.Batches.Load(), "concurrent claims shared transactions")
	require.Greater(t, b.Claims.Load(), b.Batches.Load())
}

// TestBatcherFallsBackWhenABatchFails: a row PostgreSQL refuses fails the
// shared transaction; every request is then claimed on its own, so the bad
// one gets its error and the others their claims.
func TestBatcherFallsBackWhenABatchFails(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	b := newBatcher(t, h, 1)
	// Block the single committer in a first transaction so the rest queue
	// up into one batch.
	lock, err := h.DB.SQL.Begin()
	require.NoError(t, err)
	_, err = lock.Exec(`LOCK TABLE webhook_event IN SHARE MODE`)
	require.NoError(t, err)

	type result struct {
		id      string
		claimed bool
		err     error
	}
	results := make(chan result, 21)
	claim := func(c ledger.Claim) {
		ctx, cancel := context.WithTimeout(context.Background(), dbtest.Patience)
		defer cancel()
		ok, err := b.Claim(ctx, c)
		results <- result{c.EventID, ok, err}
	}
	go claim(claimOf("evt_first", "invoice.paid"))
	waitLockWaiter(t, h)
	bad := claimOf("evt_bad", "invoice.paid")
	// A payload jsonb refuses never joins a batch; a header jsonb refuses
	// does, and fails it.
	bad.Headers = map[string]string{"X-Note": "a\x00b"}
	go claim(bad)
	for i := range 19 {
		go claim(claimOf(fmt.Sprintf("evt_ok%d", i), "invoice.paid"))
	}
	waitQueued(t, b, 20)
	require.NoError(t, lock.Rollback())

	for range 21 {
		r := <-results
		if r.id == "evt_bad" {
			require.Error(t, r.err)
			require.True(t, ledger.IsBadData(r.err), "%v", r.err)
			continue
		}
		require.NoError(t, r.err, r.id)
		require.True(t, r.claimed, r.id)
	}
	require.Equal(t, 20, h.DB.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Equal(t, 20, h.DB.Count(t, ledgertest.JobCoverageSQL))
	require.Zero(t, b.Batches.Load(), "the failed batch committed nothing")
}

func TestBatcherAlonePassesStraightThrough(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	b := newBatcher(t, h, 2)
	in := claimOf("evt_alone", "invoice.paid")
	idx := 1
	in.SecretIndex = &idx
	ok, err := b.Claim(context.Background(), in)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = b.Claim(context.Background(), in)
	require.NoError(t, err)
	require.False(t, ok)
	require.Zero(t, b.Batches.Load(), "an idle batcher never waits to gather")
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE secret_index = 1 AND headers->>'User-Agent' = 'Stripe/1.0'`))
}

func TestBatcherRecordsEveryColumn(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, nil)
	b := newBatcher(t, h, 1)
	lock, err := h.DB.SQL.Begin()
	require.NoError(t, err)
	_, err = lock.Exec(`LOCK TABLE webhook_event IN SHARE MODE`)
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	claim := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := claimOf(fmt.Sprintf("evt_col%d", i), "invoice.paid")
			idx, skew := i, time.Duration(i)*time.Second
			in.SecretIndex, in.ClockSkew, in.OccurredAt, in.Replayed = &idx, &skew, time.Unix(1_700_000_000, 0), i == 3
			if i == 2 {
				in.SecretIndex, in.ClockSkew, in.OccurredAt = nil, nil, time.Time{}
			}
			_, err := b.Claim(context.Background(), in)
			errs <- err
		}()
	}
	// The first holds the committer on the lock; the other three queue up
	// and then commit as one batch.
	claim(0)
	waitLockWaiter(t, h)
	for i := 1; i < 4; i++ {
		claim(i)
	}
	waitQueued(t, b, 3)
	require.NoError(t, lock.Rollback())
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(1), b.Batches.Load(), "the three that queued committed as one batch")
	require.Equal(t, int64(3), b.Claims.Load())
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_col3' AND secret_index = 3 AND clock_skew_ms = 3000 AND replayed AND occurred_at = to_timestamp(1700000000)`))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_col2' AND secret_index IS NULL AND clock_skew_ms IS NULL AND occurred_at IS NULL AND NOT replayed`))
	require.Equal(t, 4, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE payload::jsonb->>'type' = 'invoice.paid' AND provider = 'stripe' AND source = 'stripe'`))
}

// TestBatchApplySplitsOnFailure: events claimed together are applied in one
// transaction; when one of them fails, the batch is split and every event
// succeeds, retries or fails on its own.
func TestBatchApplySplitsOnFailure(t *testing.T) {
	t.Parallel()
	var failures atomic.Int32
	h := ledgertest.New(t, 2, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(_ context.Context, _ *ledger.Tx, ev *ledger.Event) error {
			if ev.EventID == "evt_split_bad" {
				failures.Add(1)
				return ledger.Permanent(fmt.Errorf("poison"))
			}
			return nil
		})
	})
	err := ledger.InTx(context.Background(), h.DB.SQL, func(tx *ledger.Tx) error {
		var keys []ledger.EventKey
		for _, id := range []string{"evt_split_a", "evt_split_bad", "evt_split_c"} {
			if _, err := tx.ExecContext(context.Background(), `INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload) VALUES ('stripe', $1, 'stripe', 'stripe', 'invoice.paid', '{}')`, id); err != nil {
				return err
			}
			keys = append(keys, ledger.EventKey{Namespace: "stripe", EventID: id})
		}
		_, err := h.River.InsertTx(context.Background(), tx.Tx, ledger.ApplyBatchArgs{Events: keys}, nil)
		return err
	})
	require.NoError(t, err)
	h.WaitSettled(t, "stripe", "evt_split_a")
	h.WaitSettled(t, "stripe", "evt_split_c")
	require.Eventually(t, func() bool { return h.Row(t, "stripe", "evt_split_bad").Status == "failed" }, dbtest.Patience, 20*time.Millisecond)
	require.Equal(t, 1, h.Row(t, "stripe", "evt_split_a").Attempts, "settled once, by its own job")
	require.Equal(t, 1, h.Row(t, "stripe", "evt_split_bad").Attempts)
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_batch' AND state = 'completed'`))
	require.Equal(t, 3, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event'`))

	require.Eventually(t, func() bool {
		job, err := ledger.FindJob(context.Background(), h.DB.SQL, "stripe", "evt_split_bad")
		require.NoError(t, err)
		return job.State == "cancelled"
	}, dbtest.Patience, 20*time.Millisecond, "its own job, the newest, is found")
}

func TestBatchApplyAllInOneTransaction(t *testing.T) {
	t.Parallel()
	var applied atomic.Int32
	h := ledgertest.New(t, 2, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(context.Context, *ledger.Tx, *ledger.Event) error { applied.Add(1); return nil })
	})
	var keys []ledger.EventKey
	err := ledger.InTx(context.Background(), h.DB.SQL, func(tx *ledger.Tx) error {
		for i := range 10 {
			id := fmt.Sprintf("evt_all_%d", i)
			if _, err := tx.ExecContext(context.Background(), `INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload) VALUES ('stripe', $1, 'stripe', 'stripe', 'invoice.paid', '{}')`, id); err != nil {
				return err
			}
			keys = append(keys, ledger.EventKey{Namespace: "stripe", EventID: id})
		}
		_, err := h.River.InsertTx(context.Background(), tx.Tx, ledger.ApplyBatchArgs{Events: keys}, nil)
		return err
	})
	require.NoError(t, err)
	for _, k := range keys {
		h.WaitSettled(t, k.Namespace, k.EventID)
	}
	require.Equal(t, int32(10), applied.Load())
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event'`), "no split")
	job, err := ledger.FindJob(context.Background(), h.DB.SQL, "stripe", "evt_all_3")
	require.NoError(t, err)
	require.Equal(t, "completed", job.State)
}
