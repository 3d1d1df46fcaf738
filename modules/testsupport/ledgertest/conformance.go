package ledgertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// Module is what Conformance needs of a feature module.
type Module struct {
	// Register wires the module, and any module it relays events to, into
	// a harness of the suite's (as New's register does).
	Register func(h *Harness)
	// Events are the module's events as its providers send them, each
	// once, with ids of their own.
	Events []Event
	// Check asserts the end state once every event has been applied: the
	// module's expectations of its tables.
	Check func(t testing.TB, h *Harness)
	// State, when set, is a query of the module's tables whose rows must
	// be the same after every way of applying the events (leave out what
	// may rightly differ: generated ids, times, which of two identical
	// events a row names).
	State string
}

// Event is one event of a Module, as its provider sends it. Its provider
// is also its namespace and its source.
type Event struct {
	Provider, ID, Type string
	Payload            []byte
}

// Conformance is the suite every feature module's tests run. It applies
// the module's events, each on a database of its own:
//
//   - one by one, a transaction per event, in order, reversed and
//     shuffled;
//   - delivered more than once (the duplicates are claimed as duplicates
//     and their apply jobs find them settled);
//   - applied, then all re-applied on purpose (requeue --force), some
//     twice;
//   - as one batch, through the workers, in one transaction;
//   - as two batches that two workers apply at once;
//   - in two transactions at once that apply halves of the events in
//     opposite orders, event by event in step (each waits until the other
//     has applied its event of the step), then commit together.
//
// After each run every event is settled, Check passes and State reads as
// it does after the first run. A transaction that PostgreSQL ends as a
// deadlock (40P01) fails the suite: a module whose handlers write as they
// go locks rows in the order events come, which two applies can reverse;
// one that stages its writes (ledger.Write) is written in one order.
func Conformance(t *testing.T, m Module) {
	t.Helper()
	require.NotNil(t, m.Register, "Module.Register")
	require.NotNil(t, m.Check, "Module.Check")
	require.NotEmpty(t, m.Events, "Module.Events")
	ids := map[string]bool{}
	for _, ev := range m.Events {
		k := ev.Provider + "/" + ev.ID
		require.False(t, ids[k], "event %s is listed twice: give each event its own id", k)
		ids[k] = true
	}
	var reference []string
	t.Run(scenarios[0].name, func(t *testing.T) {
		reference = runScenario(t, m, scenarios[0])
	})
	for _, sc := range scenarios[1:] {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			state := runScenario(t, m, sc)
			if m.State != "" && reference != nil {
				require.Equal(t, reference, state, "the end state differs from %q's", scenarios[0].name)
			}
		})
	}
}

// scenario is one way Conformance applies a module's events.
type scenario struct {
	name    string
	workers int
	run     func(t *testing.T, h *Harness, evs []Event, rnd *rand.Rand) error
}

var scenarios = []scenario{
	{name: "one by one, in order", run: func(t *testing.T, h *Harness, evs []Event, _ *rand.Rand) error {
		return deliverAll(t, h, evs)
	}},
	{name: "one by one, reversed", run: func(t *testing.T, h *Harness, evs []Event, _ *rand.Rand) error {
		return deliverAll(t, h, reversed(evs))
	}},
	{name: "one by one, shuffled", run: func(t *testing.T, h *Harness, evs []Event, rnd *rand.Rand) error {
		return deliverAll(t, h, shuffled(evs, rnd))
	}},
	{name: "duplicates", run: func(t *testing.T, h *Harness, evs []Event, rnd *rand.Rand) error {
		var deliveries []Event
		for i, ev := range evs {
			deliveries = append(deliveries, ev, ev)
			if i%2 == 0 {
				deliveries = append(deliveries, ev)
			}
		}
		return deliverAll(t, h, shuffled(deliveries, rnd))
	}},
	{name: "forced re-applies", run: func(t *testing.T, h *Harness, evs []Event, rnd *rand.Rand) error {
		if err := deliverAll(t, h, shuffled(evs, rnd)); err != nil {
			return err
		}
		again := shuffled(evs, rnd)
		again = append(again, again[:(len(again)+1)/2]...)
		for _, ev := range again {
			if err := h.Apply(t, ev.Provider, ev.ID, true); err != nil {
				return fmt.Errorf("re-apply %s/%s on purpose: %w", ev.Provider, ev.ID, err)
			}
		}
		return nil
	}},
	{name: "one batch", workers: 1, run: func(t *testing.T, h *Harness, evs []Event, rnd *rand.Rand) error {
		return batches(t, h, shuffled(evs, rnd))
	}},
	{name: "two batches at once", workers: 2, run: func(t *testing.T, h *Harness, evs []Event, _ *rand.Rand) error {
		even, odd := halves(evs)
		return batches(t, h, even, odd)
	}},
	{name: "two transactions, opposite orders", run: func(t *testing.T, h *Harness, evs []Event, _ *rand.Rand) error {
		even, odd := halves(evs)
		return inStep(t, h, even, reversed(odd))
	}},
}

// runScenario applies m's events as sc says on a harness of its own,
// checks the end state and returns m's State.
func runScenario(t *testing.T, m Module, sc scenario) []string {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	h := New(t, sc.workers, m.Register)
	require.NoError(t, sc.run(t, h, m.Events, rand.New(rand.NewPCG(seed, seed))))
	// The runs through the ledger settle every event; the one beside it
	// (inStep) claims none.
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE status <> 'settled'`), "every event settles")
	m.Check(t, h)
	if m.State == "" {
		return nil
	}
	state := dbtest.Strings(t, h.DB.SQL, `SELECT q::text FROM (`+m.State+`) q`)
	slices.Sort(state)
	return state
}

// deliverAll claims and applies each delivery in order, a transaction
// each, as the HTTP path and the worker do; a duplicate is claimed as one
// and its apply finds the event settled.
func deliverAll(t *testing.T, h *Harness, deliveries []Event) error {
	for _, ev := range deliveries {
		if err := h.Deliver(t, ev.Provider, ev.ID, ev.Type, ev.Payload); err != nil {
			return fmt.Errorf("deliver %s/%s: %w", ev.Provider, ev.ID, err)
		}
	}
	return nil
}

// batches writes the ledger rows of every event and one apply_batch job
// per list, in one transaction, as group commits do, and waits until the
// workers have settled them all.
func batches(t *testing.T, h *Harness, lists ...[]Event) error {
	ctx := context.Background()
	err := ledger.InTx(ctx, h.DB.SQL, func(tx *ledger.Tx) error {
		var params []river.InsertManyParams
		for _, evs := range lists {
			var keys []ledger.EventKey
			for _, ev := range evs {
				if _, err := tx.ExecContext(ctx, `INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload)
					VALUES ($1, $2, $1, $1, $3, $4)`, ev.Provider, ev.ID, ev.Type, string(ev.Payload)); err != nil {
					return err
				}
				keys = append(keys, ledger.EventKey{Namespace: ev.Provider, EventID: ev.ID})
			}
			if len(keys) > 0 {
				params = append(params, river.InsertManyParams{Args: ledger.ApplyBatchArgs{Events: keys}})
			}
		}
		_, err := h.River.InsertManyTx(ctx, tx.Tx, params)
		return err
	})
	if err != nil {
		return fmt.Errorf("insert the batches: %w", err)
	}
	for _, evs := range lists {
		for _, ev := range evs {
			h.WaitSettled(t, ev.Provider, ev.ID)
		}
	}
	return nil
}

// inStep applies a and b in two transactions at once, one event of each
// per step: both apply their event of a step, and the next step begins
// when both are done (or one failed). The handlers run as the apply runs
// them, without the ledger, as each event is applied once. Then both
// commit at once, which makes the writes they staged. A transaction that
// fails fails the run, a deadlock named as one.
func inStep(t *testing.T, h *Harness, a, b []Event) error {
	ctx, cancel := context.WithTimeout(context.Background(), dbtest.Patience)
	defer cancel()
	txs := []*steppedTx{startTx(ctx, h), startTx(ctx, h)}
	lists := [][]Event{a, b}
	var errs []error
	for step := 0; step < max(len(a), len(b)); step++ {
		var sent []*steppedTx
		for i, tx := range txs {
			if tx.alive && step < len(lists[i]) {
				tx.steps <- lists[i][step]
				sent = append(sent, tx)
			}
		}
		for _, tx := range sent {
			if err := <-tx.done; err != nil {
				tx.alive = false
				errs = append(errs, err)
			}
		}
	}
	for _, tx := range txs {
		close(tx.steps)
	}
	for _, tx := range txs {
		if err := <-tx.ended; err != nil && tx.alive {
			errs = append(errs, err)
		}
	}
	for _, err := range errs {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			return fmt.Errorf("deadlock (40P01) between two transactions that apply events in opposite orders: "+
				"the module writes as its handlers run; stage its writes with ledger.Write: %w", err)
		}
	}
	return errors.Join(errs...)
}

// steppedTx is a transaction of inStep's, which applies the events sent
// on steps, answers each on done, and commits when steps is closed,
// answering on ended.
type steppedTx struct {
	steps       chan Event
	done, ended chan error
	alive       bool
}

func startTx(ctx context.Context, h *Harness) *steppedTx {
	tx := &steppedTx{steps: make(chan Event), done: make(chan error, 1), ended: make(chan error, 1), alive: true}
	go func() {
		tx.ended <- ledger.InTxWithJobs(ctx, h.DB.SQL, h.River, func(ltx *ledger.Tx) error {
			for ev := range tx.steps {
				err := runHandlers(ctx, ltx, h.Registry, ev)
				tx.done <- err
				if err != nil {
					for range tx.steps { // nothing more is sent
					}
					return err
				}
			}
			return nil
		})
	}()
	return tx
}

// runHandlers runs the handlers of ev inside tx, as the apply does.
func runHandlers(ctx context.Context, tx *ledger.Tx, reg *ledger.Registry, ev Event) error {
	e := &ledger.Event{Namespace: ev.Provider, EventID: ev.ID, Provider: ev.Provider, Source: ev.Provider, Type: ev.Type, Payload: ev.Payload}
	for _, h := range reg.Handlers(ev.Provider, ev.Type) {
		if err := h(ctx, tx, e); err != nil {
			return fmt.Errorf("apply %s/%s: %w", ev.Provider, ev.ID, err)
		}
	}
	return nil
}

func reversed(evs []Event) []Event {
	out := slices.Clone(evs)
	slices.Reverse(out)
	return out
}

func shuffled(evs []Event, rnd *rand.Rand) []Event {
	out := slices.Clone(evs)
	rnd.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// halves splits evs into the events at even and at odd positions, each
// in order.
func halves(evs []Event) (even, odd []Event) {
	for i, ev := range evs {
		if i%2 == 0 {
			even = append(even, ev)
		} else {
			odd = append(odd, ev)
		}
	}
	return even, odd
}

// CorpusEvent is an event of testdata/corpus, the official example
// payloads of each provider.
type CorpusEvent struct {
	Event
	File string
}

// Corpus returns the events of testdata/corpus that keep selects, those
// hookledger stores: not the deliveries it answers without storing, nor
// its known refusals.
func Corpus(t testing.TB, keep func(provider, eventType string) bool) []CorpusEvent {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "testdata", "corpus")
	raw, err := os.ReadFile(filepath.Join(dir, "MANIFEST.json"))
	require.NoError(t, err)
	var m struct {
		Files []struct {
			File      string          `json:"file"`
			Provider  string          `json:"provider"`
			EventID   string          `json:"event_id"`
			EventType string          `json:"event_type"`
			Answer    string          `json:"answer"`
			Refused   json.RawMessage `json:"refused"`
		} `json:"files"`
	}
	require.NoError(t, json.Unmarshal(raw, &m))
	var out []CorpusEvent
	for _, f := range m.Files {
		if f.Answer == "ignored" || len(f.Refused) > 0 || !keep(f.Provider, f.EventType) {
			continue
		}
		body, err := os.ReadFile(filepath.Join(dir, f.File))
		require.NoError(t, err)
		out = append(out, CorpusEvent{Event: Event{Provider: f.Provider, ID: f.EventID, Type: f.EventType, Payload: body}, File: f.File})
	}
	require.NotEmpty(t, out, "no corpus event selected")
	return out
}

// Events returns the events of cs.
func Events(cs []CorpusEvent) []Event {
	out := make([]Event, len(cs))
	for i, c := range cs {
		out[i] = c.Event
	}
	return out
}

var (
	rootOnce sync.Once
	root     string
)

// repoRoot is the folder of go.mod, above the test's working folder.
func repoRoot(t testing.TB) string {
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		for err == nil {
			if _, statErr := os.Stat(filepath.Join(dir, "go.mod")); statErr == nil {
				root = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				return
			}
			dir = parent
		}
	})
	require.NotEmpty(t, root, "go.mod not found above the working folder")
	return root
}
