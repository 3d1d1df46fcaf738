package ledger_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// rowKey is a test module's business key: a namespace and a number.
type rowKey struct {
	Namespace string
	N         int64
}

// flushed records what a Write's Flush was given, call by call.
type flushed[K comparable, V any] struct {
	mu    sync.Mutex
	calls [][]ledger.Entry[K, V]
}

func (f *flushed[K, V]) flush(_ context.Context, _ *ledger.Tx, entries []ledger.Entry[K, V]) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, append([]ledger.Entry[K, V](nil), entries...))
	return nil
}

func appendValues(older, newer []string) []string { return append(older, newer...) }

// TestWriteFoldsInOrderAndFlushesOnceSorted: the values put under one key
// are folded in the order they were put, and the transaction's Flush
// gets every key once, sorted field by field (strings by bytes, integers
// by value, negative ones first), in a single call when it commits.
func TestWriteFoldsInOrderAndFlushesOnceSorted(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	reg := ledger.NewRegistry()
	var got flushed[rowKey, []string]
	w := ledger.NewWrite(reg, ledger.WriteFuncs[rowKey, []string]{Merge: appendValues, Flush: got.flush})
	ctx := context.Background()
	puts := []struct {
		k rowKey
		v string
	}{
		{rowKey{"b", 1}, "b1"}, {rowKey{"a", 10}, "a10"}, {rowKey{"a", -3}, "a-3"}, {rowKey{"b", 1}, "b1 again"},
		{rowKey{"a\x00", 0}, "a nul"}, {rowKey{"", 7}, "empty"}, {rowKey{"a", 2}, "a2"}, {rowKey{"b", 1}, "b1 last"},
	}
	require.NoError(t, ledger.InTx(ctx, db.SQL, func(tx *ledger.Tx) error {
		for _, p := range puts {
			w.Put(tx, p.k, []string{p.v})
		}
		v, ok := w.Get(tx, rowKey{"b", 1})
		require.True(t, ok)
		require.Equal(t, []string{"b1", "b1 again", "b1 last"}, v, "the fold so far")
		_, ok = w.Get(tx, rowKey{"z", 0})
		require.False(t, ok)
		require.Empty(t, got.calls, "nothing is written before the transaction ends")
		return nil
	}))
	require.Len(t, got.calls, 1, "one Flush per transaction")
	var keys []rowKey
	for _, e := range got.calls[0] {
		keys = append(keys, e.Key)
	}
	require.Equal(t, []rowKey{{"", 7}, {"a", -3}, {"a", 2}, {"a", 10}, {"a\x00", 0}, {"b", 1}}, keys)
	require.Equal(t, []string{"b1", "b1 again", "b1 last"}, got.calls[0][5].Value)

	require.NoError(t, ledger.InTx(ctx, db.SQL, func(*ledger.Tx) error { return nil }))
	require.Len(t, got.calls, 1, "a transaction that puts nothing writes nothing")
}

// TestWriteLoadStartsEachFoldFromTheStoredValue: with Load, Merge sees
// every value of a key after the stored one, in the order they were put,
// and a key with no stored value starts from its first.
func TestWriteLoadStartsEachFoldFromTheStoredValue(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	reg := ledger.NewRegistry()
	var (
		got    flushed[string, []string]
		loaded [][]string
	)
	w := ledger.NewWrite(reg, ledger.WriteFuncs[string, []string]{
		Merge: appendValues,
		Load: func(_ context.Context, _ *ledger.Tx, keys []string) ([]ledger.Entry[string, []string], error) {
			loaded = append(loaded, keys)
			return []ledger.Entry[string, []string]{{Key: "stored", Value: []string{"row"}}}, nil
		},
		Flush: got.flush,
	})
	ctx := context.Background()
	require.NoError(t, ledger.InTx(ctx, db.SQL, func(tx *ledger.Tx) error {
		w.Put(tx, "stored", []string{"first"})
		w.Put(tx, "new", []string{"one"})
		w.Put(tx, "stored", []string{"second"})
		w.Put(tx, "new", []string{"two"})
		return nil
	}))
	require.Equal(t, [][]string{{"new", "stored"}}, loaded, "the batch's keys, sorted, in one Load")
	require.Equal(t, []ledger.Entry[string, []string]{
		{Key: "new", Value: []string{"one", "two"}},
		{Key: "stored", Value: []string{"row", "first", "second"}},
	}, got.calls[0])
}

// TestWriteFailureIsItsModules: a Write's failure fails the apply, named
// after the module that registered it, as a handler's failure is.
func TestWriteFailureIsItsModules(t *testing.T) {
	t.Parallel()
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) {
		w := ledger.NewWrite(h.Registry, ledger.WriteFuncs[string, int]{
			Merge: func(_, newer int) int { return newer },
			Flush: func(context.Context, *ledger.Tx, []ledger.Entry[string, int]) error { return errors.New("refused") },
		})
		h.Registry.Handle("stripe", "invoice.paid", func(_ context.Context, tx *ledger.Tx, ev *ledger.Event) error {
			w.Put(tx, ev.EventID, 1)
			return nil
		})
	})
	err := h.Deliver(t, "stripe", "evt_refused", "invoice.paid", []byte(`{}`))
	var he *ledger.HandlerError
	require.ErrorAs(t, err, &he)
	require.Equal(t, "ledger_test.Flush", he.Handler)
	require.EqualError(t, err, "ledger_test.Flush: refused")
	require.Equal(t, "claimed", h.Row(t, "stripe", "evt_refused").Status, "rolled back")
}

// TestWriteFailsOnlyItsEvent: a Write flushes once for the whole batch,
// after its handlers; when it fails (an error or a panic), nothing of the
// batch is kept, the batch splits, and each event's own job finds the one
// that fails: its row is failed with the reason and a retry of its own,
// and its siblings settle with their effect exactly once.
func TestWriteFailsOnlyItsEvent(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"evt_bad_error", "evt_bad_panic"} {
		t.Run(bad, func(t *testing.T) {
			t.Parallel()
			h := ledgertest.New(t, 2, func(h *ledgertest.Harness) {
				effects := ledger.NewWrite(h.Registry, ledger.WriteFuncs[string, bool]{
					Merge: func(older, _ bool) bool { return older },
					Flush: func(ctx context.Context, tx *ledger.Tx, entries []ledger.Entry[string, bool]) error {
						ids := make([]string, len(entries))
						for i, e := range entries {
							switch e.Key {
							case "evt_bad_error":
								return errors.New("write refused evt_bad_error")
							case "evt_bad_panic":
								panic("write panicked on evt_bad_panic")
							}
							ids[i] = e.Key
						}
						_, err := tx.ExecContext(ctx, `INSERT INTO write_effect SELECT unnest($1::text[])`, ids)
						return err
					},
				})
				h.Registry.Handle("stripe", "invoice.paid", func(_ context.Context, tx *ledger.Tx, ev *ledger.Event) error {
					effects.Put(tx, ev.EventID, true)
					return nil
				})
			})
			_, err := h.DB.SQL.Exec(`CREATE TABLE write_effect (event_id text PRIMARY KEY)`)
			require.NoError(t, err)
			insertBatch(t, h, "invoice.paid", "evt_sib_a", bad, "evt_sib_b")
			h.WaitSettled(t, "stripe", "evt_sib_a")
			h.WaitSettled(t, "stripe", "evt_sib_b")
			row := waitRow(t, h, bad, "failed", func(r ledgertest.Row) bool { return r.Status == "failed" })
			require.Contains(t, row.LastError.String, bad, "the reason")
			require.Contains(t, row.LastError.String, "ledger_test.Flush: ", "the Write is named, panic or not")
			require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM write_effect WHERE event_id IN ('evt_sib_a', 'evt_sib_b')`))
			require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM write_effect WHERE event_id = $1`, bad))
			requireOwnRetry(t, h, bad)
		})
	}
}

// TestWriteFailureInTxNamesItsModuleOnce: a Write that fails when InTx
// flushes it before the commit is named once, after its module and step,
// as in an apply: the transaction's own flush adds no name of its own.
func TestWriteFailureInTxNamesItsModuleOnce(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	reg := ledger.NewRegistry()
	w := ledger.NewWrite(reg, ledger.WriteFuncs[string, int]{
		Merge: func(_, newer int) int { return newer },
		Flush: func(context.Context, *ledger.Tx, []ledger.Entry[string, int]) error { return errors.New("refused") },
	})
	err := ledger.InTx(context.Background(), db.SQL, func(tx *ledger.Tx) error {
		w.Put(tx, "k", 1)
		return nil
	})
	var he *ledger.HandlerError
	require.ErrorAs(t, err, &he)
	require.Equal(t, "ledger_test.Flush", he.Handler)
	require.EqualError(t, err, "ledger_test.Flush: refused")
}

// TestNewWriteRefusesKeysItCannotOrder: a key of a type the apply cannot
// sort stops the process at start-up, with the reason.
func TestNewWriteRefusesKeysItCannotOrder(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	reg := ledger.NewRegistry()
	type floatKey struct{ Amount float64 }
	ledger.NewWrite(reg, ledger.WriteFuncs[floatKey, int]{
		Merge: func(_, newer int) int { return newer },
		Flush: func(context.Context, *ledger.Tx, []ledger.Entry[floatKey, int]) error { return nil },
	})
	ledger.NewWrite(reg, ledger.WriteFuncs[string, int]{})
	_, err := ledger.NewRiver(db.SQL, nil, ledger.RiverOptions{Registry: reg, Logger: zaptest.NewLogger(t), Metrics: metrics.New()})
	require.ErrorContains(t, err, "cannot be ordered")
	require.ErrorContains(t, err, "Merge and Flush are required")
}

// TestWritesOfTwoTransactionsTakeTurns: the apply locks every key of its
// Writes before the first Flush, so two transactions whose statements
// lock the same rows in opposite orders take turns instead of
// deadlocking: the second waits until the first commits, and then sees
// its rows.
func TestWritesOfTwoTransactionsTakeTurns(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	_, err := db.SQL.Exec(`CREATE TABLE turn (k text PRIMARY KEY, n int NOT NULL); INSERT INTO turn VALUES ('a', 0), ('b', 0)`)
	require.NoError(t, err)
	first, proceed := make(chan struct{}), make(chan struct{})
	reg := ledger.NewRegistry()
	w := ledger.NewWrite(reg, ledger.WriteFuncs[string, bool]{
		Merge: func(older, _ bool) bool { return older },
		Flush: func(ctx context.Context, tx *ledger.Tx, entries []ledger.Entry[string, bool]) error {
			// Rows one by one, the last key first; the first transaction
			// holds its first row until the other is waiting.
			for i := len(entries) - 1; i >= 0; i-- {
				if _, err := tx.ExecContext(ctx, `UPDATE turn SET n = n + 1 WHERE k = $1`, entries[i].Key); err != nil {
					return err
				}
				if entries[i].Value && i == len(entries)-1 {
					close(first)
					<-proceed
				}
			}
			return nil
		},
	})
	ctx := context.Background()
	apply := func(isFirst bool, keys ...string) chan error {
		done := make(chan error, 1)
		go func() {
			done <- ledger.InTx(ctx, db.SQL, func(tx *ledger.Tx) error {
				for _, k := range keys {
					w.Put(tx, k, isFirst)
				}
				return nil
			})
		}()
		return done
	}
	firstDone := apply(true, "a", "b")
	<-first
	secondDone := apply(false, "b", "a")
	dbtest.Eventually(t, func() bool {
		return db.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND wait_event = 'advisory'`) == 1
	}, "the second transaction never waited for the first's keys")
	close(proceed)
	require.NoError(t, <-firstDone)
	require.NoError(t, <-secondDone)
	require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM turn WHERE n = 2`))
}

// TestHandlersRunWithDefaultPlannerSettings: the apply's own statements
// are planned its way, but its handlers and their Writes run with the
// transaction's own settings, in an apply of one event and in a batch.
func TestHandlersRunWithDefaultPlannerSettings(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []string
	)
	settings := func(ctx context.Context, tx *ledger.Tx, where string) error {
		var s string
		err := tx.QueryRowContext(ctx, `SELECT concat_ws(' ', current_setting('plan_cache_mode'), current_setting('enable_seqscan'),
			current_setting('enable_hashjoin'), current_setting('enable_mergejoin'))`).Scan(&s)
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, where+": "+s)
		return err
	}
	register := func(h *ledgertest.Harness) {
		w := ledger.NewWrite(h.Registry, ledger.WriteFuncs[string, int]{
			Merge: func(_, newer int) int { return newer },
			Flush: func(ctx context.Context, tx *ledger.Tx, _ []ledger.Entry[string, int]) error {
				return settings(ctx, tx, "flush")
			},
		})
		h.Registry.Handle("stripe", "invoice.paid", func(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
			w.Put(tx, ev.EventID, 1)
			return settings(ctx, tx, "handler")
		})
	}
	// Apply, as replay's direct mode and the tests call it.
	alone := ledgertest.New(t, 0, register)
	require.NoError(t, alone.Deliver(t, "stripe", "evt_plan_alone", "invoice.paid", []byte(`{}`)))
	// The workers: a batch, and a claim's job of one event.
	h := ledgertest.New(t, 1, register)
	keys := h.InsertBatch(t, "stripe",
		ledgertest.BatchEvent{ID: "evt_plan_a", Type: "invoice.paid", Payload: []byte(`{}`)},
		ledgertest.BatchEvent{ID: "evt_plan_b", Type: "invoice.paid", Payload: []byte(`{}`)})
	for _, k := range keys {
		h.WaitSettled(t, k.Namespace, k.EventID)
	}
	h.Claim(t, "stripe", "evt_plan_c", "invoice.paid", []byte(`{}`))
	h.WaitSettled(t, "stripe", "evt_plan_c")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 4+3, "four handlers, three transactions' writes")
	for _, s := range seen {
		require.Regexp(t, `^(handler|flush): auto on on on$`, s)
	}
}
