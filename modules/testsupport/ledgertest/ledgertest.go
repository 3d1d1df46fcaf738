// Package ledgertest is the test harness modules share: a database of the
// test's own, a registry, a River client built from it and helpers that
// claim and apply events the way the HTTP path and the worker do; and
// Conformance, the suite every feature module's tests run on its events.
package ledgertest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// Harness is one test's ledger.
type Harness struct {
	DB       *dbtest.DB
	Registry *ledger.Registry
	River    *river.Client[*sql.Tx]
	Claimer  *ledger.Store
	Metrics  *metrics.Set
}

// New builds the harness. register wires the modules under test; with
// workers > 0 River works jobs until the test ends, otherwise tests apply
// events themselves with Apply.
func New(t testing.TB, workers int, register func(h *Harness)) *Harness {
	t.Helper()
	return NewWith(t, ledger.RiverOptions{Workers: workers}, register)
}

// NewWith is New with River options of the test's own (timeouts, retry
// horizon); the registry, logger and metrics are the harness's.
func NewWith(t testing.TB, o ledger.RiverOptions, register func(h *Harness)) *Harness {
	t.Helper()
	workers := o.Workers
	db := dbtest.New(t)
	h := &Harness{DB: db, Registry: ledger.NewRegistry(), Metrics: metrics.New()}
	if register != nil {
		register(h)
	}
	o.Registry, o.Logger, o.Metrics = h.Registry, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), h.Metrics
	client, err := ledger.NewRiver(db.SQL, db.Listener(t), o)
	require.NoError(t, err)
	h.River = client
	// The claims keep their payloads for the apply when the workers do,
	// as in a process of role all.
	h.Claimer = ledger.NewStore(db.SQL, client, ledger.StoreOptions{Payloads: o.Payloads})
	if workers > 0 {
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(t, client.Start(ctx))
		t.Cleanup(func() {
			cancel()
			<-client.Stopped()
		})
	}
	return h
}

// Claim claims an event as the HTTP path would; namespace and source are
// the provider's name.
func (h *Harness) Claim(t testing.TB, provider, id, typ string, payload []byte) bool {
	t.Helper()
	res, err := h.Claimer.Claim(context.Background(), ledger.Claim{
		Namespace: provider, EventID: id, Provider: provider, Source: provider, Type: typ, Payload: payload,
	})
	require.NoError(t, err)
	return res == ledger.Claimed
}

// InsertBatch writes ledger rows for events (of provider, each a type and
// payload under its id) and one apply_batch job for all of them, in one
// transaction, as a group commit does: with workers, River applies them
// in one transaction.
func (h *Harness) InsertBatch(t testing.TB, provider string, events ...BatchEvent) []ledger.EventKey {
	t.Helper()
	ctx := context.Background()
	var keys []ledger.EventKey
	err := ledger.InTx(ctx, h.DB.SQL, func(tx *ledger.Tx) error {
		for _, ev := range events {
			if _, err := tx.ExecContext(ctx, `INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload)
				VALUES ($1, $2, $1, $1, $3, $4)`, provider, ev.ID, ev.Type, string(ev.Payload)); err != nil {
				return err
			}
			keys = append(keys, ledger.EventKey{Namespace: provider, EventID: ev.ID})
		}
		_, err := h.River.InsertTx(ctx, tx.Tx, ledger.ApplyBatchArgs{Events: keys}, nil)
		return err
	})
	require.NoError(t, err)
	return keys
}

// BatchEvent is one event of InsertBatch.
type BatchEvent struct {
	ID, Type string
	Payload  []byte
}

// Apply runs the apply step of one event in a transaction of its own, as
// the worker does (the handlers' jobs insert through the harness's River
// client), and returns the handlers' error.
func (h *Harness) Apply(t testing.TB, namespace, id string, force bool) error {
	t.Helper()
	ctx := context.Background()
	return ledger.InTxWithJobs(ctx, h.DB.SQL, h.River, func(tx *ledger.Tx) error {
		_, _, err := ledger.Apply(ctx, tx, h.Registry, ledger.ApplyArgs{Namespace: namespace, EventID: id, Force: force})
		return err
	})
}

// Deliver claims and applies an event; a duplicate is claimed again and
// applied only if it was new, as hookledger does.
func (h *Harness) Deliver(t testing.TB, provider, id, typ string, payload []byte) error {
	t.Helper()
	h.Claim(t, provider, id, typ, payload)
	return h.Apply(t, provider, id, false)
}

// WaitSettled waits until the event is settled by the workers.
func (h *Harness) WaitSettled(t testing.TB, namespace, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = $1 AND event_id = $2 AND status = 'settled'`, namespace, id) == 1
	}, dbtest.Patience, 20*time.Millisecond, "event %s/%s never settled", namespace, id)
}

// Row is a ledger row's status fields.
type Row struct {
	Status    string
	Attempts  int
	LastError sql.NullString
}

// Row reads the ledger row of an event.
func (h *Harness) Row(t testing.TB, namespace, id string) Row {
	t.Helper()
	var r Row
	err := h.DB.SQL.QueryRow(`SELECT status, attempts, last_error FROM webhook_event WHERE namespace = $1 AND event_id = $2`, namespace, id).
		Scan(&r.Status, &r.Attempts, &r.LastError)
	require.NoError(t, err)
	return r
}

// JobCoverageSQL counts the ledger keys that apply jobs carry: one per
// apply_event job, one per event of an apply_batch job.
const JobCoverageSQL = `SELECT (SELECT count(*) FROM river_job WHERE kind = 'apply_event')
	+ (SELECT COALESCE(sum(jsonb_array_length(args->'events')), 0) FROM river_job WHERE kind = 'apply_batch')`

// Erase is what `hookledger erase --subject` does, checked for a module
// whose rows holding the subject holding counts: a dry run reports rows
// row(s) of module and changes nothing; the erase of the ledger and of
// the modules then reports the same and leaves no row holding it.
func (h *Harness) Erase(t testing.TB, subject, module string, rows int, holding func() int) {
	t.Helper()
	ctx := context.Background()
	before := holding()
	dry, err := h.Claimer.EraseModules(ctx, h.Registry, subject, "", true)
	require.NoError(t, err)
	require.Equal(t, []ledger.ModuleErasure{{Module: module, Rows: int64(rows)}}, dry)
	require.Equal(t, before, holding(), "a dry run changes nothing")

	_, err = h.Claimer.Erase(ctx, subject, "", false)
	require.NoError(t, err)
	done, err := h.Claimer.EraseModules(ctx, h.Registry, subject, "", false)
	require.NoError(t, err)
	require.Equal(t, dry, done, "the erase changes what the dry run counted")
	require.Zero(t, holding(), "no row holds the subject")
}
