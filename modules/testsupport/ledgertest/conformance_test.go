package ledgertest

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// level is a test module's event: a key's level, which only rises. Its
// table keeps the highest level of each key.
type level struct {
	Key   string `field:"key"`
	Level int64  `field:"level"`
}

var levelFields = provider.FieldsOf[level]()

// createLevels makes the test modules' table, at registration.
func createLevels(h *Harness) {
	if _, err := h.DB.SQL.Exec(`CREATE TABLE conformance_level (key text PRIMARY KEY, level bigint NOT NULL)`); err != nil {
		panic(err)
	}
}

// writesAsItGoes is a module that writes each event's row as its handler
// runs: correct alone, but two applies that meet its rows in opposite
// orders lock them in opposite orders.
func writesAsItGoes(h *Harness) {
	createLevels(h)
	h.Registry.Handle("standard", "level.raised", func(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
		l, err := levelFields.Read(ev.Payload)
		if err != nil {
			return ledger.Permanent(err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO conformance_level AS c (key, level) VALUES ($1, $2)
			ON CONFLICT (key) DO UPDATE SET level = GREATEST(c.level, EXCLUDED.level)`, l.Key, l.Level)
		if err != nil {
			return fmt.Errorf("raise %s: %w", l.Key, err)
		}
		return nil
	})
}

// stagesItsWrites is the same module on a ledger.Write: its handler puts
// each event's level, and the apply writes the batch's highest level of
// each key at once.
func stagesItsWrites(h *Harness) {
	createLevels(h)
	levels := ledger.NewWrite(h.Registry, ledger.WriteFuncs[string, int64]{
		Merge: func(older, newer int64) int64 { return max(older, newer) },
		Flush: func(ctx context.Context, tx *ledger.Tx, entries []ledger.Entry[string, int64]) error {
			keys, values := make([]string, len(entries)), make([]int64, len(entries))
			for i, e := range entries {
				keys[i], values[i] = e.Key, e.Value
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO conformance_level AS c (key, level)
				SELECT * FROM unnest($1::text[], $2::bigint[])
				ON CONFLICT (key) DO UPDATE SET level = GREATEST(c.level, EXCLUDED.level)`, keys, values)
			return err
		},
	})
	h.Registry.Handle("standard", "level.raised", func(_ context.Context, tx *ledger.Tx, ev *ledger.Event) error {
		l, err := levelFields.Read(ev.Payload)
		if err != nil {
			return ledger.Permanent(err)
		}
		levels.Put(tx, l.Key, l.Level)
		return nil
	})
}

// levelModule is a test module's Conformance input: two keys, two events
// each, so that the halves of the suite's opposite-order run meet over
// both keys in opposite orders.
func levelModule(register func(h *Harness)) Module {
	raise := func(id, key string, lvl int) Event {
		return Event{Provider: "standard", ID: id, Type: "level.raised", Payload: fmt.Appendf(nil, `{"key":%q,"level":%d}`, key, lvl)}
	}
	return Module{
		Register: register,
		Events:   []Event{raise("msg_1", "a", 1), raise("msg_2", "a", 2), raise("msg_3", "b", 1), raise("msg_4", "b", 2)},
		Check: func(t testing.TB, h *Harness) {
			require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM conformance_level WHERE level = 2`))
			require.Equal(t, 2, h.DB.Count(t, `SELECT count(*) FROM conformance_level`))
		},
		State: `SELECT key, level FROM conformance_level`,
	}
}

// TestConformanceFailsAModuleThatWritesAsItGoes: the suite's two
// transactions that apply events in opposite orders end in a deadlock
// when the module writes as its handlers run, and the suite names it.
func TestConformanceFailsAModuleThatWritesAsItGoes(t *testing.T) {
	t.Parallel()
	m := levelModule(writesAsItGoes)
	var opposite scenario
	for _, sc := range scenarios {
		if sc.name == "two transactions, opposite orders" {
			opposite = sc
		}
	}
	require.NotNil(t, opposite.run)
	h := New(t, opposite.workers, m.Register)
	err := opposite.run(t, h, m.Events, nil)
	require.ErrorContains(t, err, "deadlock (40P01)")
	require.ErrorContains(t, err, "stage its writes with ledger.Write")
}

// TestConformancePassesTheSameModuleOnAWrite: the same module, its writes
// staged, passes every run of the suite.
func TestConformancePassesTheSameModuleOnAWrite(t *testing.T) {
	t.Parallel()
	Conformance(t, levelModule(stagesItsWrites))
}
