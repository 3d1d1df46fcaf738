package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// sideEffectArgs is a module's own job kind, keyed by the event that
// inserted it.
type sideEffectArgs struct {
	EventID string `json:"event_id"`
}

func (sideEffectArgs) Kind() string { return "test_side_effect" }

type sideEffectWorker struct {
	river.WorkerDefaults[sideEffectArgs]
	ran chan string
}

func (w *sideEffectWorker) Work(_ context.Context, job *river.Job[sideEffectArgs]) error {
	w.ran <- job.Args.EventID
	return nil
}

// applyEventArgs claims the ledger's own apply job kind.
type applyEventArgs struct{}

func (applyEventArgs) Kind() string { return "apply_event" }

type applyEventWorker struct {
	river.WorkerDefaults[applyEventArgs]
}

func (applyEventWorker) Work(context.Context, *river.Job[applyEventArgs]) error { return nil }

// pruneArgs claims the ledger's prune job kind.
type pruneArgs struct{}

func (pruneArgs) Kind() string { return "prune_ledger" }

type pruneWorker struct {
	river.WorkerDefaults[pruneArgs]
}

func (pruneWorker) Work(context.Context, *river.Job[pruneArgs]) error { return nil }

// TestRegistrationErrorsFailNewRiver: a job kind registered twice, a module
// worker of one of the ledger's own kinds and a malformed pattern are
// reported by NewRiver, for a client that works jobs and an insert-only
// one alike, so no role starts on such a registry; NewRiver only reads
// the registry, so a second client on a sound one starts as well.
func TestRegistrationErrorsFailNewRiver(t *testing.T) {
	db := dbtest.New(t)
	newRiver := func(reg *ledger.Registry, workers int) error {
		_, err := ledger.NewRiver(db.SQL, nil, ledger.RiverOptions{
			Workers: workers, Registry: reg, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), Metrics: metrics.New(),
		})
		return err
	}
	for name, tc := range map[string]struct {
		register func(*ledger.Registry)
		want     string
	}{
		"kind twice": {func(r *ledger.Registry) {
			ledger.AddWorker(r, &sideEffectWorker{})
			ledger.AddWorker(r, &sideEffectWorker{})
		}, `worker for kind "test_side_effect" is already registered`},
		"ledger's kind": {func(r *ledger.Registry) {
			ledger.AddWorker(r, applyEventWorker{})
		}, `worker for kind "apply_event" is already registered`},
		"ledger's prune kind, retention off": {func(r *ledger.Registry) {
			ledger.AddWorker(r, pruneWorker{})
		}, `worker for kind "prune_ledger" is already registered`},
		"pattern": {func(r *ledger.Registry) {
			r.Handle("stripe", "invoice.*.paid", func(context.Context, *ledger.Tx, *ledger.Event) error { return nil })
		}, `"invoice.*.paid": a wildcard only stands at the end`},
	} {
		t.Run(name, func(t *testing.T) {
			for _, workers := range []int{0, 2} {
				reg := ledger.NewRegistry()
				tc.register(reg)
				err := newRiver(reg, workers)
				require.Error(t, err, "workers=%d", workers)
				require.Contains(t, err.Error(), tc.want, "workers=%d", workers)
			}
		})
	}

	reg := ledger.NewRegistry()
	ledger.AddWorker(reg, &sideEffectWorker{})
	require.NoError(t, newRiver(reg, 2))
	require.NoError(t, newRiver(reg, 2), "a second client on the same registry")
}

// TestHandlerJobsCommitWithTheApply: a job a handler inserts through its Tx
// is in the apply transaction. When a later handler of the event fails,
// the job is rolled back with the apply; when the apply commits, the job
// is there and its worker, registered in the registry, runs it.
func TestHandlerJobsCommitWithTheApply(t *testing.T) {
	worker := &sideEffectWorker{ran: make(chan string, 4)}
	insert := func(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
		return tx.InsertJob(ctx, sideEffectArgs{EventID: ev.EventID}, nil)
	}
	h := ledgertest.New(t, 2, func(h *ledgertest.Harness) {
		ledger.AddWorker(h.Registry, worker)
		h.Registry.Handle("stripe", "invoice.paid", insert)
		h.Registry.Handle("stripe", "invoice.voided", insert)
		h.Registry.Handle("stripe", "invoice.voided", func(context.Context, *ledger.Tx, *ledger.Event) error {
			return ledger.Permanent(errors.New("after the insert"))
		})
	})
	jobs := func(eventID string) int {
		return h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'test_side_effect' AND args->>'event_id' = $1`, eventID)
	}

	h.Claim(t, "stripe", "evt_rolled_back", "invoice.voided", []byte(`{}`))
	// The failure is recorded after the apply rolled back.
	dbtest.Eventually(t, func() bool { return h.Row(t, "stripe", "evt_rolled_back").Status == "failed" })
	require.Contains(t, h.Row(t, "stripe", "evt_rolled_back").LastError.String, "after the insert")
	require.Zero(t, jobs("evt_rolled_back"), "the handler's job rolled back with the apply")

	h.Claim(t, "stripe", "evt_committed", "invoice.paid", []byte(`{}`))
	h.WaitSettled(t, "stripe", "evt_committed")
	select {
	case id := <-worker.ran:
		require.Equal(t, "evt_committed", id)
	case <-time.After(20 * time.Second):
		t.Fatal("the committed job never ran")
	}
	require.Equal(t, 1, jobs("evt_committed"))
	require.Zero(t, jobs("evt_rolled_back"))
}
