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
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) >= 1
	}, "no committer waits on the lock")
}

// waitQueued waits until n requests wait for a committer.
func waitQueued(t *testing.T, b *ledger.Batcher, n int) {
	t.Helper()
	dbtest.Eventually(t, func() bool { return b.Queued() == n }, "requests never queued")
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
				res, err := b.Claim(ctx, claimOf(fmt.Sprintf("evt_b%d", i), "invoice.paid"))
				if err != nil {
					t.Error(err) // reported from this goroutine; require stops only the test's own
					return
				}
				if res == ledger.Claimed {
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
		id  string
		res ledger.ClaimResult
		err error
	}
	results := make(chan result, 21)
	claim := func(c ledger.Claim) {
		ctx, cancel := context.WithTimeout(context.Background(), dbtest.Patience)
		defer cancel()
		res, err := b.Claim(ctx, c)
		results <- result{c.EventID, res, err}
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
		require.Equal(t, ledger.Claimed, r.res, r.id)
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
	res, err := b.Claim(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, ledger.Claimed, res)
	res, err = b.Claim(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, ledger.Duplicate, res)
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
	insertBatch(t, h, "invoice.paid", "evt_split_a", "evt_split_bad", "evt_split_c")
	h.WaitSettled(t, "stripe", "evt_split_a")
	h.WaitSettled(t, "stripe", "evt_split_c")
	dbtest.Eventually(t, func() bool { return h.Row(t, "stripe", "evt_split_bad").Status == "failed" })
	require.Equal(t, 1, h.Row(t, "stripe", "evt_split_a").Attempts, "settled once, by its own job")
	require.Equal(t, 1, h.Row(t, "stripe", "evt_split_bad").Attempts)
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_batch' AND state = 'completed'`))
	require.Equal(t, 3, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event'`))

	dbtest.Eventually(t, func() bool {
		job, err := store(h).FindJob(context.Background(), "stripe", "evt_split_bad")
		require.NoError(t, err)
		return job.State == "cancelled"
	}, "its own job, the newest, is found")
}

func TestBatchApplyAllInOneTransaction(t *testing.T) {
	t.Parallel()
	var applied atomic.Int32
	h := ledgertest.New(t, 2, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "invoice.paid", func(context.Context, *ledger.Tx, *ledger.Event) error { applied.Add(1); return nil })
	})
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt_all_%d", i)
	}
	keys := insertBatch(t, h, "invoice.paid", ids...)
	for _, k := range keys {
		h.WaitSettled(t, k.Namespace, k.EventID)
	}
	require.Equal(t, int32(10), applied.Load())
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event'`), "no split")
	job, err := store(h).FindJob(context.Background(), "stripe", "evt_all_3")
	require.NoError(t, err)
	require.Equal(t, "completed", job.State)
}

// deliveries exercises every branch of the claim: new events with and
// without the optional columns, a redelivery inside the same batch and one
// of an event committed before it, and, for a provider that signs only the
// body, a body replayed under a forged id and a redelivery of the body's
// own id.
func deliveries() []ledger.Claim {
	full := claimOf("evt_full", "invoice.paid")
	idx, skew := 2, 1500*time.Millisecond
	full.SecretIndex, full.ClockSkew, full.OccurredAt = &idx, &skew, time.Unix(1_700_000_000, 0)
	bare := claimOf("evt_bare", "invoice.paid")
	bare.Headers, bare.Replayed = nil, true
	push := func(id string) ledger.Claim {
		return ledger.Claim{Namespace: "github", EventID: id, Provider: "github", Source: "github", Type: "push",
			Payload: []byte(`{"ref":"refs/heads/main"}`), BodyDigest: "digest-of-the-push"}
	}
	first := claimOf("evt_first", "invoice.paid")
	return []ledger.Claim{first, full, bare, full, push("guid-1"), push("guid-forged"), push("guid-1"), first}
}

// claimSnapshot is what a claim leaves in the database: every ledger row
// and, per event, the apply jobs that cover it.
func claimSnapshot(t *testing.T, h *ledgertest.Harness) (rows, jobs string) {
	t.Helper()
	require.NoError(t, h.DB.SQL.QueryRow(`SELECT string_agg(row(namespace, event_id, provider, source, event_type, payload, headers,
		secret_index, clock_skew_ms, occurred_at, replayed, body_digest, status, attempts)::text, E'\n' ORDER BY namespace, event_id) FROM webhook_event`).Scan(&rows))
	require.NoError(t, h.DB.SQL.QueryRow(`SELECT string_agg(k, E'\n' ORDER BY k) FROM (
		SELECT (args->>'namespace') || '/' || (args->>'event_id') || ' force=' || COALESCE(args->>'force', 'false') AS k FROM river_job WHERE kind = 'apply_event'
		UNION ALL
		SELECT (e->>'namespace') || '/' || (e->>'event_id') || ' force=false' FROM river_job, jsonb_array_elements(args->'events') e WHERE kind = 'apply_batch') j`).Scan(&jobs))
	return rows, jobs
}

// TestOneClaimForOneAndMany: the same deliveries claimed one by one
// (Store.Claim) and together in one group-commit transaction (Batcher)
// give the same answers, the same ledger rows and the same jobs, in both
// claim modes.
func TestOneClaimForOneAndMany(t *testing.T) {
	const (
		C = ledger.Claimed
		D = ledger.Duplicate
		L = ledger.LoggedDuplicate
	)
	for _, tc := range []struct {
		name    string
		logOnly bool
		want    []ledger.ClaimResult
		jobs    string
	}{
		{"enforce", false, []ledger.ClaimResult{C, C, C, D, C, D, D, D},
			"github/guid-1 force=false\nstripe/evt_bare force=false\nstripe/evt_first force=false\nstripe/evt_full force=false"},
		// A duplicate of an event still to be applied is left to its
		// job: only an applied event is applied again.
		{"log-only", true, []ledger.ClaimResult{C, C, C, L, C, L, L, L},
			"github/guid-1 force=true\nstripe/evt_bare force=true\nstripe/evt_first force=true\nstripe/evt_full force=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := deliveries()

			one := ledgertest.New(t, 0, nil)
			store := ledger.NewStore(one.DB.SQL, one.River, ledger.StoreOptions{LogOnly: tc.logOnly})
			var alone []ledger.ClaimResult
			for _, c := range in {
				res, err := store.Claim(context.Background(), c)
				require.NoError(t, err, c.EventID)
				alone = append(alone, res)
			}
			require.Equal(t, tc.want, alone, "claimed one by one")

			many := ledgertest.New(t, 0, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b := ledger.NewBatcher(ctx, ledger.NewStore(many.DB.SQL, many.River, ledger.StoreOptions{LogOnly: tc.logOnly}), 1, 256)
			lock, err := many.DB.SQL.Begin()
			require.NoError(t, err)
			_, err = lock.Exec(`LOCK TABLE webhook_event IN SHARE MODE`)
			require.NoError(t, err)
			together := make([]ledger.ClaimResult, len(in))
			errs := make([]error, len(in))
			var wg sync.WaitGroup
			for i, c := range in {
				wg.Go(func() { together[i], errs[i] = b.Claim(context.Background(), c) })
				// The first holds the committer on the lock; the others
				// queue in this order and then commit as one batch.
				if i == 0 {
					waitLockWaiter(t, many)
				} else {
					waitQueued(t, b, i)
				}
			}
			require.NoError(t, lock.Rollback())
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, in[i].EventID)
			}
			require.Equal(t, int64(1), b.Batches.Load())
			require.Equal(t, int64(len(in)-1), b.Claims.Load(), "all but the first in one transaction")
			require.Equal(t, tc.want, together, "claimed together")

			rows, jobs := claimSnapshot(t, one)
			rowsMany, jobsMany := claimSnapshot(t, many)
			require.Equal(t, rows, rowsMany)
			require.Equal(t, jobs, jobsMany)
			require.Equal(t, tc.jobs, jobs)
			require.Equal(t, 4, one.DB.Count(t, `SELECT count(*) FROM webhook_event`), "a forged id with a known body writes nothing")
			require.Equal(t, 1, one.DB.Count(t, `SELECT count(*) FROM webhook_event
				WHERE event_id = 'evt_full' AND secret_index = 2 AND clock_skew_ms = 1500 AND occurred_at = to_timestamp(1700000000) AND NOT replayed`))
			require.Equal(t, 1, one.DB.Count(t, `SELECT count(*) FROM webhook_event
				WHERE event_id = 'evt_bare' AND secret_index IS NULL AND clock_skew_ms IS NULL AND occurred_at IS NULL AND replayed`))
		})
	}
}
