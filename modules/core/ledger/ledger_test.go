package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

type fixture struct {
	*ledgertest.Harness
	db       *dbtest.DB
	registry *ledger.Registry
	claimer  *ledger.Store
}

// setup gives a test its own ledger; workers > 0 starts River workers.
func setup(t *testing.T, workers int, register func(*ledger.Registry)) *fixture {
	t.Helper()
	h := ledgertest.New(t, workers, func(h *ledgertest.Harness) {
		if register != nil {
			register(h.Registry)
		}
	})
	return &fixture{Harness: h, db: h.DB, registry: h.Registry, claimer: h.Claimer}
}

func claimOf(id, typ string) ledger.Claim {
	return ledger.Claim{
		Namespace: "stripe", EventID: id, Provider: "stripe", Source: "stripe", Type: typ,
		Payload: []byte(`{"id":"` + id + `","type":"` + typ + `","created":1700000000}`),
		Headers: map[string]string{"User-Agent": "Stripe/1.0"},
	}
}

func (f *fixture) status(t *testing.T, id string) (string, int, sql.NullString) {
	t.Helper()
	r := f.Row(t, "stripe", id)
	return r.Status, r.Attempts, r.LastError
}

func TestClaimOnceUnderConcurrency(t *testing.T) {
	t.Parallel()
	f := setup(t, 0, nil)
	var claimed atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := f.claimer.Claim(context.Background(), claimOf("evt_storm", "invoice.paid"))
			if err != nil {
				t.Error(err) // reported from this goroutine; require stops only the test's own
				return
			}
			if res == ledger.Claimed {
				claimed.Add(1)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int32(1), claimed.Load())
	require.Equal(t, 1, f.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Equal(t, 1, f.db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event'`))
	status, attempts, _ := f.status(t, "evt_storm")
	require.Equal(t, "claimed", status)
	require.Zero(t, attempts)
}

func TestClaimRecordsDelivery(t *testing.T) {
	t.Parallel()
	f := setup(t, 0, nil)
	in := claimOf("evt_rec", "invoice.paid")
	idx, skew := 1, 1500*time.Millisecond
	in.SecretIndex, in.ClockSkew = &idx, &skew
	res, err := f.claimer.Claim(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, ledger.Claimed, res)
	var (
		secretIndex int
		skewMs      int64
		ua          string
		replayed    bool
	)
	require.NoError(t, f.db.SQL.QueryRow(`SELECT secret_index, clock_skew_ms, headers->>'User-Agent', replayed FROM webhook_event`).
		Scan(&secretIndex, &skewMs, &ua, &replayed))
	require.Equal(t, 1, secretIndex)
	require.Equal(t, int64(1500), skewMs)
	require.Equal(t, "Stripe/1.0", ua)
	require.False(t, replayed)
}

func TestClaimTimeoutIsUnavailable(t *testing.T) {
	t.Parallel()
	f := setup(t, 0, nil)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := f.claimer.Claim(ctx, claimOf("evt_late", "invoice.paid"))
	require.Error(t, err)
	require.True(t, ledger.IsUnavailable(err), "%v", err)
	require.Zero(t, f.db.Count(t, `SELECT count(*) FROM webhook_event`))
}

// TestClaimRollsBackWhenJobInsertFails: a claim without its apply job would
// be a 2xx that is never applied, so the two commit or fail together. The
// job's insert fails after the ledger row's, inside the claim.
func TestClaimRollsBackWhenJobInsertFails(t *testing.T) {
	t.Parallel()
	f := setup(t, 0, nil)
	_, err := f.db.SQL.Exec(`
		CREATE FUNCTION refuse_job() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'no job today'; END $$;
		CREATE TRIGGER refuse_job BEFORE INSERT ON river_job FOR EACH ROW EXECUTE FUNCTION refuse_job()`)
	require.NoError(t, err)
	_, err = f.claimer.Claim(context.Background(), claimOf("evt_nojob", "invoice.paid"))
	require.ErrorContains(t, err, "no job today")
	require.False(t, ledger.IsUnavailable(err), "a refused job is no outage: %v", err)
	require.Zero(t, f.db.Count(t, `SELECT count(*) FROM webhook_event`))
}

func TestApplySettlesOnceAndSkipsSettled(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	f := setup(t, 0, func(r *ledger.Registry) {
		r.Handle("stripe", "invoice.*", func(context.Context, *ledger.Tx, *ledger.Event) error {
			runs.Add(1)
			return nil
		})
	})
	ctx := context.Background()
	_, err := f.claimer.Claim(ctx, claimOf("evt_a", "invoice.paid"))
	require.NoError(t, err)
	args := ledger.ApplyArgs{Namespace: "stripe", EventID: "evt_a"}
	for _, want := range []ledger.Outcome{ledger.OutcomeSettled, ledger.OutcomeSkipped} {
		require.NoError(t, ledger.InTx(ctx, f.db.SQL, func(tx *ledger.Tx) error {
			_, outcome, err := ledger.Apply(ctx, tx, f.registry, args)
			require.Equal(t, want, outcome)
			return err
		}))
	}
	require.Equal(t, int32(1), runs.Load(), "a settled event is not applied again")
	status, attempts, _ := f.status(t, "evt_a")
	require.Equal(t, "settled", status)
	require.Equal(t, 1, attempts)

	args.Force = true
	require.NoError(t, ledger.InTx(ctx, f.db.SQL, func(tx *ledger.Tx) error {
		ev, outcome, err := ledger.Apply(ctx, tx, f.registry, args)
		require.Equal(t, ledger.OutcomeSettled, outcome)
		require.True(t, ev.Forced)
		return err
	}))
	require.Equal(t, int32(2), runs.Load(), "force applies a settled event again")
}

func TestUnhandledTypeSettles(t *testing.T) {
	t.Parallel()
	f := setup(t, 0, nil)
	ctx := context.Background()
	_, err := f.claimer.Claim(ctx, claimOf("evt_other", "account.updated"))
	require.NoError(t, err)
	require.NoError(t, ledger.InTx(ctx, f.db.SQL, func(tx *ledger.Tx) error {
		_, _, err := ledger.Apply(ctx, tx, f.registry, ledger.ApplyArgs{Namespace: "stripe", EventID: "evt_other"})
		return err
	}))
	status, _, _ := f.status(t, "evt_other")
	require.Equal(t, "settled", status)
}

// TestWorkerRetriesThenSettlesOnce runs real River workers: the handler
// fails on its first attempt, leaving the row failed with the reason, and
// the retry settles it exactly once.
func TestWorkerRetriesThenSettlesOnce(t *testing.T) {
	t.Parallel()
	var calls, effects atomic.Int32
	f := setup(t, 2, func(r *ledger.Registry) {
		r.Handle("stripe", "invoice.paid", func(context.Context, *ledger.Tx, *ledger.Event) error {
			if calls.Add(1) == 1 {
				return errors.New("upstream timeout")
			}
			effects.Add(1)
			return nil
		})
	})
	_, err := f.claimer.Claim(context.Background(), claimOf("evt_retry", "invoice.paid"))
	require.NoError(t, err)

	dbtest.Eventually(t, func() bool { s, _, _ := f.status(t, "evt_retry"); return s == "failed" })
	_, attempts, lastErr := f.status(t, "evt_retry")
	require.Equal(t, 1, attempts)
	require.Contains(t, lastErr.String, "upstream timeout")

	dbtest.Eventually(t, func() bool { s, _, _ := f.status(t, "evt_retry"); return s == "settled" })
	_, attempts, lastErr = f.status(t, "evt_retry")
	require.Equal(t, 2, attempts)
	require.False(t, lastErr.Valid)
	require.Equal(t, int32(1), effects.Load())
	require.Equal(t, 1, f.db.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND state = 'completed'`))
}

func TestWorkerStopsOnPermanentError(t *testing.T) {
	t.Parallel()
	f := setup(t, 1, func(r *ledger.Registry) {
		r.Handle("stripe", "invoice.paid", func(context.Context, *ledger.Tx, *ledger.Event) error {
			return ledger.Permanent(errors.New("poison payload"))
		})
	})
	_, err := f.claimer.Claim(context.Background(), claimOf("evt_poison", "invoice.paid"))
	require.NoError(t, err)
	dbtest.Eventually(t, func() bool {
		return f.db.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep' AND state = 'cancelled'`) == 1
	})
	status, attempts, lastErr := f.status(t, "evt_poison")
	require.Equal(t, string(webhookevent.StatusFailed), status)
	require.Equal(t, 1, attempts)
	require.Contains(t, lastErr.String, "poison payload")
}

func TestRegistryFamilies(t *testing.T) {
	t.Parallel()
	r := ledger.NewRegistry()
	var got []string
	mk := func(name string) ledger.HandlerFunc {
		return func(context.Context, *ledger.Tx, *ledger.Event) error { got = append(got, name); return nil }
	}
	r.Handle("stripe", "customer.subscription.*", mk("family"))
	r.Handle("stripe", "customer.subscription.created", mk("exact"))
	r.Handle("paddle", "*", mk("paddle-all"))
	for _, h := range r.Handlers("stripe", "customer.subscription.created") {
		require.NoError(t, h(context.Background(), nil, nil))
	}
	require.Equal(t, []string{"exact", "family"}, got)
	require.Empty(t, r.Handlers("stripe", "customer.created"))
	require.Len(t, r.Handlers("paddle", "anything"), 1)
}

func TestRetryDelayIsCapped(t *testing.T) {
	t.Parallel()
	// Doubling from a second, capped at an hour, plus up to a quarter of
	// jitter.
	for a, base := range map[int]time.Duration{
		1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 10: 512 * time.Second, 12: 2048 * time.Second,
		13: time.Hour, 19: time.Hour, 20: time.Hour, 25: time.Hour, 100: time.Hour,
	} {
		for range 20 {
			d := ledger.RetryDelay(a)
			require.GreaterOrEqual(t, d, base, "attempt %d", a)
			require.LessOrEqual(t, d, base+base/4, "attempt %d", a)
		}
	}
}

// TestIncompleteClaimsAreRefused: a claim without one of its keys is bad
// data (a 400 at the receiver), refused alone and in a batch, and writes
// nothing.
func TestIncompleteClaimsAreRefused(t *testing.T) {
	t.Parallel()
	f := setup(t, 0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	batcher := ledger.NewBatcher(ctx, f.claimer, 1, 8)
	for _, blank := range []func(*ledger.Claim){
		func(c *ledger.Claim) { c.EventID = "" },
		func(c *ledger.Claim) { c.Namespace = "" },
		func(c *ledger.Claim) { c.Provider = "" },
		func(c *ledger.Claim) { c.Source = "" },
	} {
		c := claimOf("evt_incomplete", "invoice.paid")
		blank(&c)
		_, err := f.claimer.Claim(ctx, c)
		require.ErrorIs(t, err, ledger.ErrIncomplete)
		require.True(t, ledger.IsBadData(err))
		_, err = batcher.Claim(ctx, c)
		require.ErrorIs(t, err, ledger.ErrIncomplete)
	}
	require.Equal(t, 0, f.db.Count(t, `SELECT count(*) FROM webhook_event`))
	require.Equal(t, 0, f.db.Count(t, `SELECT count(*) FROM river_job WHERE kind <> 'ledger_sweep'`))
}
