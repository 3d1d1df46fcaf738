package ledger_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// The lifecycle model test: a seeded random walk over every actor that
// changes an event (deliveries and duplicates, handlers that fail, panic
// or fail for good and then recover, requeue, forced re-apply, discard,
// erase, prune, log-only redelivery, River's Cancel and Delete, the
// rescuer giving up, the sweep, workers stopped and killed mid-apply)
// against real PostgreSQL and real River workers, checking after every
// step that the ledger and River agree with the lifecycle table, that no
// event was applied twice unless forced, that an erased subject is gone
// from everything that held it, and that each command's report is what
// its rows show. LIFECYCLE_DURATION sets its budget (go tool task
// test:lifecycle), LIFECYCLE_SEED replays one walk: a failing walk prints
// its seed and its steps.

// modelSteps is the number of steps of one walk, before its end.
const modelSteps = 40

// defaultModelBudget is the model test's budget in go tool task test.
const defaultModelBudget = 20 * time.Second

func TestLifecycleModel(t *testing.T) {
	t.Parallel()
	budget := defaultModelBudget
	if v := os.Getenv("LIFECYCLE_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LIFECYCLE_DURATION=%q: want a Go duration such as 90s", v)
		}
		budget = d
	}
	first, walks := uint64(time.Now().UnixNano()%1_000_000), 0
	if v := os.Getenv("LIFECYCLE_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("LIFECYCLE_SEED=%q: want a number", v)
		}
		first, walks = s, 1
	}
	deadline := time.Now().Add(budget)
	steps, seed := 0, first
	for n := 0; walks == 0 && (n == 0 || time.Now().Before(deadline)) || walks == 1 && n == 0; n++ {
		// A subtest per walk: its database and connections go when it ends.
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { steps += runWalk(t, seed) })
		seed++
		if t.Failed() {
			return
		}
	}
	fmt.Printf("lifecycle: %d walks, %d steps, seeds %d-%d: no invariant broken\n", seed-first, steps, first, seed-1)
}

// Handler modes of the model's events.
const (
	modeOK = iota
	modeFail
	modePanic
	modePermanent
)

// walk is one random walk.
type walk struct {
	t     *testing.T
	seed  uint64
	rnd   *rand.Rand
	h     *ledgertest.Harness
	ctx   context.Context
	store *ledger.Store
	// logOnly claims as CLAIM_MODE=log-only does.
	logOnly *ledger.Store

	mu      sync.Mutex
	mode    map[string]int
	subject map[string]string

	workers *river.Client[*sql.Tx]
	stop    context.CancelFunc

	events []string
	pruned map[string]bool
	// erased are the subjects erased with nothing left pending.
	erased []string
	// orphaned are events whose job a River-side actor touched since the
	// last sweep: until a sweep they may have none.
	orphaned map[string]bool
	steps    []string
}

func (w *walk) modeOf(id string) (int, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mode[id], w.subject[id]
}

func (w *walk) setMode(id string, m int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mode[id] = m
}

// runWalk runs the walk of seed and returns its steps.
func runWalk(t *testing.T, seed uint64) int {
	w := &walk{t: t, seed: seed, rnd: rand.New(rand.NewPCG(seed, 0x686f6f6b)), ctx: context.Background(),
		mode: map[string]int{}, subject: map[string]string{}, pruned: map[string]bool{}, orphaned: map[string]bool{}}
	w.h = ledgertest.New(t, 0, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "model.event", w.handle)
		h.Registry.Erase(eraseModelRows)
	})
	_, err := w.h.DB.SQL.Exec(`CREATE TABLE model_effect (event_id text NOT NULL, forced boolean NOT NULL);
		CREATE TABLE model_row (id bigserial PRIMARY KEY, namespace text NOT NULL, customer text NOT NULL, event_id text NOT NULL)`)
	w.must(err, "create the model's tables")
	w.store = store(w.h)
	w.logOnly = ledger.NewStore(w.h.DB.SQL, w.h.River, ledger.StoreOptions{LogOnly: true})
	w.startWorkers()
	defer func() { w.stopWorkers(false) }()

	actors := []struct {
		weight int
		run    func()
	}{
		{20, w.deliverNew}, {5, w.deliverAgain}, {5, w.redeliverLogOnly}, {8, w.fix}, {3, w.breakHandler},
		{8, w.requeue}, {4, w.forceRequeue}, {6, w.discard}, {3, w.erase}, {2, w.prune},
		{4, w.riverCancel}, {3, w.riverDelete}, {2, w.rescuerGivesUp}, {4, w.sweep},
		{2, w.restart}, {2, w.kill}, {6, w.settleDown},
	}
	total := 0
	for _, a := range actors {
		total += a.weight
	}
	for range modelSteps {
		n := w.rnd.IntN(total)
		for _, a := range actors {
			if n < a.weight {
				a.run()
				break
			}
			n -= a.weight
		}
		if t.Failed() {
			return len(w.steps)
		}
		w.check()
		if t.Failed() {
			return len(w.steps)
		}
	}
	w.finish()
	return len(w.steps)
}

// handle is the model module's handler: by the event's mode it fails
// (quoting the subject, as a real error quotes a customer), panics, fails
// for good, or records its effect and a row holding the subject.
func (w *walk) handle(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	mode, subject := w.modeOf(ev.EventID)
	switch mode {
	case modeFail:
		return fmt.Errorf("customer %s: card network down", subject)
	case modePanic:
		panic("no plan for " + subject)
	case modePermanent:
		return ledger.Permanent(fmt.Errorf("poison payload for %s", subject))
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO model_effect (event_id, forced) VALUES ($1, $2)`, ev.EventID, ev.Forced); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO model_row (namespace, customer, event_id) VALUES ($1, $2, $3)`, ev.Namespace, subject, ev.EventID)
	return err
}

// eraseModelRows is the model module's erase hook.
func eraseModelRows(ctx context.Context, tx *ledger.Tx, subject, namespace string, dryRun bool) (int64, error) {
	if dryRun {
		var n int64
		err := tx.QueryRowContext(ctx, `SELECT count(*) FROM model_row WHERE customer = $1`, subject).Scan(&n)
		return n, err
	}
	return ledger.RedactRows(ctx, tx, "model_row", "customer", "id", subject, namespace)
}

func (w *walk) step(format string, args ...any) {
	w.steps = append(w.steps, fmt.Sprintf(format, args...))
}

// fail ends the walk with its seed and steps.
func (w *walk) fail(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("lifecycle walk seed %d (replay: LIFECYCLE_SEED=%d go test -run '^TestLifecycleModel$' ./modules/core/ledger):\n  %s\nbroke after %d steps:\n  %s",
		w.seed, w.seed, fmt.Sprintf(format, args...), len(w.steps), strings.Join(w.steps, "\n  "))
}

func (w *walk) must(err error, what string) {
	w.t.Helper()
	if err != nil {
		w.fail("%s: %v", what, err)
	}
}

// pick is a random delivered event, "" when there is none.
func (w *walk) pick() string {
	if len(w.events) == 0 {
		return ""
	}
	return w.events[w.rnd.IntN(len(w.events))]
}

var modelSubjects = []string{"cus_ada", "cus_bob", "cus_cy", "cus_dee"}

func (w *walk) claim(s *ledger.Store, id string) ledger.ClaimResult {
	_, subject := w.modeOf(id)
	res, err := s.Claim(w.ctx, ledger.Claim{Namespace: "stripe", EventID: id, Provider: "stripe", Source: "stripe", Type: "model.event",
		Payload: []byte(fmt.Sprintf(`{"id":%q,"customer":%q}`, id, subject)), Headers: map[string]string{"X-Customer": subject}})
	w.must(err, "claim "+id)
	return res
}

func (w *walk) deliverNew() {
	id := fmt.Sprintf("evt_%d", len(w.events))
	subject := modelSubjects[w.rnd.IntN(len(modelSubjects))]
	if slicesContains(w.erased, subject) {
		subject = "cus_new_" + id // the provider erased it first: no new events of it
	}
	mode := modeOK
	switch n := w.rnd.IntN(20); {
	case n < 3:
		mode = modeFail
	case n < 4:
		mode = modePanic
	case n < 6:
		mode = modePermanent
	}
	w.mu.Lock()
	w.mode[id], w.subject[id] = mode, subject
	w.mu.Unlock()
	w.step("deliver %s (%s, mode %d)", id, subject, mode)
	if res := w.claim(w.store, id); res != ledger.Claimed {
		w.fail("a new event was %v", res)
	}
	w.events = append(w.events, id)
}

func (w *walk) deliverAgain() {
	id := w.pick()
	if id == "" {
		return
	}
	w.step("deliver %s again", id)
	if res := w.claim(w.store, id); res != ledger.Duplicate {
		w.fail("a delivery of a known event (pruned: %v) was %v", w.pruned[id], res)
	}
}

func (w *walk) redeliverLogOnly() {
	id := w.pick()
	if id == "" {
		return
	}
	w.step("deliver %s again under log-only", id)
	if res := w.claim(w.logOnly, id); !res.WouldSkip() {
		w.fail("a log-only duplicate was %v", res)
	}
}

func (w *walk) fix() {
	id := w.pick()
	if id == "" {
		return
	}
	w.step("fix the handler of %s", id)
	w.setMode(id, modeOK)
}

func (w *walk) breakHandler() {
	id := w.pick()
	if id == "" {
		return
	}
	w.step("break the handler of %s", id)
	w.setMode(id, modeFail)
}

// row is an event's ledger row as a command sees it right after it.
func (w *walk) row(id string) (status string, erased, ok bool) {
	err := w.h.DB.SQL.QueryRow(`SELECT status, erased_at IS NOT NULL FROM webhook_event WHERE namespace = 'stripe' AND event_id = $1`, id).
		Scan(&status, &erased)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, false
	}
	w.must(err, "read "+id)
	return status, erased, true
}

func (w *walk) requeue() { w.requeueOf(false) }

func (w *walk) forceRequeue() { w.requeueOf(true) }

func (w *walk) requeueOf(force bool) {
	id := w.pick()
	if id == "" {
		return
	}
	w.step("requeue %s (force %v)", id, force)
	res, err := w.store.Requeue(w.ctx, "stripe", id, force)
	status, erased, exists := w.row(id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		if exists {
			w.fail("requeue said not found; the row is %s", status)
		}
	case errors.Is(err, ledger.ErrErased):
		if !erased {
			w.fail("requeue said erased; the row is not")
		}
	case errors.Is(err, ledger.ErrSettled):
		if force || status != "settled" {
			w.fail("requeue (force %v) said settled; the row is %s", force, status)
		}
	case err != nil:
		w.fail("requeue: %v", err)
	case res == ledger.RequeueRequeued && (status == "discarded" || erased):
		w.fail("requeue said requeued; the row is %s (erased %v)", status, erased)
	}
}

func (w *walk) discard() {
	id := w.pick()
	if id == "" {
		return
	}
	_, subject := w.modeOf(id)
	reason := "put away for " + subject
	w.step("discard %s", id)
	_, err := w.store.Discard(w.ctx, "stripe", id, reason)
	status, erased, exists := w.row(id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		if exists {
			w.fail("discard said not found; the row is %s", status)
		}
	case errors.Is(err, ledger.ErrNotDiscardable):
		if status != "settled" && !erased {
			w.fail("discard said not discardable; the row is %s", status)
		}
	case errors.Is(err, ledger.ErrBeingApplied):
	case err != nil:
		w.fail("discard: %v", err)
	case status != "discarded":
		w.fail("discard said discarded; the row is %s", status)
	}
}

func (w *walk) erase() {
	subject := modelSubjects[w.rnd.IntN(len(modelSubjects))]
	w.step("erase %s", subject)
	r, err := w.store.Erase(w.ctx, subject, "", false)
	w.must(err, "erase")
	for _, m := range r.Rows {
		if _, erased, _ := w.row(m.EventID); !erased {
			w.fail("erase reported %s erased; its row is not", m.EventID)
		}
	}
	_, err = w.store.EraseModules(w.ctx, w.h.Registry, subject, "", false)
	w.must(err, "erase the modules' rows")
	if len(r.Pending) == 0 && w.h.DB.Count(w.t, `SELECT count(*) FROM webhook_event WHERE erased_at IS NULL AND status NOT IN ('settled', 'discarded')
		AND payload LIKE '%' || $1 || '%'`, subject) == 0 {
		w.erased = append(w.erased, subject)
	}
}

func (w *walk) prune() {
	w.step("prune")
	before := w.h.DB.Count(w.t, `SELECT count(*) FROM webhook_event`)
	pruned := dbtest.Strings(w.t, w.h.DB.SQL, `SELECT event_id FROM webhook_event WHERE status = 'settled'`)
	r, err := w.store.Prune(w.ctx, ledger.Retention{Rows: time.Nanosecond, Keys: time.Hour}, false)
	w.must(err, "prune")
	if after := w.h.DB.Count(w.t, `SELECT count(*) FROM webhook_event`); int64(before-after) != r.Rows {
		w.fail("prune reported %d rows; %d went", r.Rows, before-after)
	}
	for _, id := range pruned {
		if _, _, exists := w.row(id); !exists {
			w.pruned[id] = true
		}
	}
}

// liveJob picks a random live apply job, and an event it carries.
func (w *walk) liveJob(running bool) (int64, []string) {
	states := `'available', 'scheduled', 'retryable', 'pending'`
	if running {
		states += `, 'running'`
	}
	rows, err := w.h.DB.SQL.Query(`SELECT id, CASE kind WHEN 'apply_batch' THEN args->'events' ELSE jsonb_build_array(args) END
		FROM river_job WHERE kind IN ('apply_event', 'apply_batch') AND state IN (` + states + `) ORDER BY id`)
	w.must(err, "list live jobs")
	defer rows.Close()
	type job struct {
		id     int64
		events []string
	}
	var jobs []job
	for rows.Next() {
		var (
			j   job
			raw []byte
			ks  []ledger.EventKey
		)
		w.must(rows.Scan(&j.id, &raw), "list live jobs")
		w.must(json.Unmarshal(raw, &ks), "read a job's events")
		for _, k := range ks {
			j.events = append(j.events, k.EventID)
		}
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return 0, nil
	}
	j := jobs[w.rnd.IntN(len(jobs))]
	return j.id, j.events
}

func (w *walk) orphan(events []string) {
	for _, id := range events {
		w.orphaned[id] = true
	}
}

func (w *walk) riverCancel() {
	id, events := w.liveJob(true)
	if id == 0 {
		return
	}
	w.step("River UI cancels job %d (%v)", id, events)
	_, err := w.h.River.JobCancel(w.ctx, id)
	if !errors.Is(err, rivertype.ErrNotFound) {
		w.must(err, "cancel a job")
	}
	w.orphan(events)
}

func (w *walk) riverDelete() {
	id, events := w.liveJob(false)
	if id == 0 {
		return
	}
	w.step("River UI deletes job %d (%v)", id, events)
	_, err := w.h.River.JobDelete(w.ctx, id)
	if err != nil && !errors.Is(err, rivertype.ErrNotFound) && !strings.Contains(err.Error(), "running") {
		w.must(err, "delete a job")
	}
	w.orphan(events)
}

func (w *walk) rescuerGivesUp() {
	id, events := w.liveJob(false)
	if id == 0 {
		return
	}
	w.step("River's rescuer gives up on job %d (%v)", id, events)
	_, err := w.h.DB.SQL.Exec(`UPDATE river_job SET state = 'discarded', attempt = max_attempts, finalized_at = now()
		WHERE id = $1 AND state <> 'running'`, id)
	w.must(err, "discard a job as the rescuer does")
	w.orphan(events)
}

func (w *walk) sweep() {
	w.step("sweep")
	// A job cancelled in River while it ran goes on running, and River
	// cancels it when its run ends, maybe after this sweep read it: its
	// events wait for a later sweep.
	still := map[string]bool{}
	for _, id := range dbtest.Strings(w.t, w.h.DB.SQL, `SELECT k->>'event_id' FROM river_job j,
			jsonb_array_elements(CASE j.kind WHEN 'apply_batch' THEN j.args->'events' ELSE jsonb_build_array(j.args) END) k
		WHERE j.kind IN ('apply_event', 'apply_batch') AND j.state = 'running' AND j.metadata ? 'cancel_attempted_at'`) {
		still[id] = true
	}
	_, err := ledger.Sweep(w.ctx, w.h.DB.SQL, w.h.River)
	w.must(err, "sweep")
	w.orphaned = still
	for _, id := range dbtest.Strings(w.t, w.h.DB.SQL, `SELECT e.event_id FROM webhook_event e WHERE status = 'claimed'
		AND NOT EXISTS (SELECT 1 FROM river_job WHERE kind = 'apply_event' AND args->>'event_id' = e.event_id AND state IN ('available', 'scheduled', 'retryable', 'running', 'pending'))
		AND NOT EXISTS (SELECT 1 FROM river_job WHERE kind = 'apply_batch' AND args->'events' @> jsonb_build_array(jsonb_build_object('namespace', e.namespace, 'event_id', e.event_id))
			AND state IN ('available', 'scheduled', 'retryable', 'running', 'pending'))`) {
		if !still[id] {
			w.fail("the sweep left %s an orphan: %s", id, w.jobsOf(id))
		}
	}
}

func (w *walk) startWorkers() {
	// Polling, not listening: a walk restarts its workers often, and
	// each listener would be a connection of its own until the walk ends.
	client, err := ledger.NewRiver(w.h.DB.SQL, nil, ledger.RiverOptions{
		Workers: 2, Registry: w.h.Registry, Logger: zap.NewNop(), Metrics: w.h.Metrics,
		ApplyTimeout: 5 * time.Second, SweepInterval: time.Hour,
	})
	w.must(err, "build the workers")
	ctx, cancel := context.WithCancel(w.ctx)
	w.must(client.Start(ctx), "start the workers")
	w.workers, w.stop = client, cancel
}

// stopWorkers stops the workers: gracefully, or by cancelling the jobs
// they run (a worker killed mid-apply).
func (w *walk) stopWorkers(kill bool) {
	if w.workers == nil {
		return
	}
	ctx, cancel := context.WithTimeout(w.ctx, dbtest.Patience)
	defer cancel()
	if kill {
		_ = w.workers.StopAndCancel(ctx)
	} else {
		_ = w.workers.Stop(ctx)
	}
	w.stop()
	<-w.workers.Stopped()
	w.workers = nil
}

func (w *walk) restart() {
	w.step("restart the workers")
	w.stopWorkers(false)
	w.startWorkers()
}

func (w *walk) kill() {
	w.step("kill the workers mid-apply")
	w.stopWorkers(true)
	w.startWorkers()
}

// settleDown lets the workers run until no job is due.
func (w *walk) settleDown() {
	w.step("let the workers run")
	dbtest.Eventually(w.t, func() bool {
		return w.h.DB.Count(w.t, `SELECT count(*) FROM river_job WHERE kind IN ('apply_event', 'apply_batch')
			AND (state = 'running' OR state = 'available' AND scheduled_at <= now())`) == 0
	}, "the due jobs never ran")
}

// finish fixes every handler, requeues what failed, sweeps, and waits for
// every event to end settled or discarded; then checks once more.
func (w *walk) finish() {
	w.step("fix every handler, requeue what failed, sweep, and wait")
	w.mu.Lock()
	for id := range w.mode {
		w.mode[id] = modeOK
	}
	w.mu.Unlock()
	dbtest.Eventually(w.t, func() bool {
		if _, err := w.store.RequeueMatching(w.ctx, ledger.Filter{Status: "failed"}, false, false); err != nil {
			w.fail("requeue the failed events: %v", err)
		}
		if _, err := ledger.Sweep(w.ctx, w.h.DB.SQL, w.h.River); err != nil {
			w.fail("sweep: %v", err)
		}
		w.orphaned = map[string]bool{}
		return w.h.DB.Count(w.t, `SELECT count(*) FROM webhook_event WHERE status NOT IN ('settled', 'discarded')`) == 0
	}, "every event settles or stays discarded")
	w.check()
}

// check is the model's invariants, on one snapshot of the ledger, River's
// jobs and the module's rows.
func (w *walk) check() {
	tx, err := w.h.DB.SQL.BeginTx(w.ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	w.must(err, "begin the check")
	defer tx.Rollback() //nolint:errcheck // read only
	rows, err := tx.Query(`
		SELECT e.event_id, e.status, e.erased_at IS NOT NULL,
			e.payload || ' ' || COALESCE(e.headers::text, '') || ' ' || COALESCE(e.last_error, '') || ' ' ||
				COALESCE(e.failure_log::text, '') || ' ' || COALESCE(e.discard_reason, ''),
			(SELECT count(*) FROM river_job j WHERE j.kind = 'apply_event' AND j.args->>'event_id' = e.event_id
				AND j.state IN ('available', 'scheduled', 'retryable', 'pending')),
			(SELECT count(*) FROM river_job j WHERE (j.kind = 'apply_event' AND j.args->>'event_id' = e.event_id
				OR j.kind = 'apply_batch' AND j.args->'events' @> jsonb_build_array(jsonb_build_object('namespace', e.namespace, 'event_id', e.event_id)))
				AND j.state IN ('available', 'scheduled', 'retryable', 'pending', 'running')),
			(SELECT count(*) FROM river_job j WHERE (j.kind = 'apply_event' AND j.args->>'event_id' = e.event_id
				OR j.kind = 'apply_batch' AND j.args->'events' @> jsonb_build_array(jsonb_build_object('namespace', e.namespace, 'event_id', e.event_id)))
				AND j.state IN ('available', 'scheduled', 'retryable', 'pending') AND NOT COALESCE((j.args->>'force')::boolean, false)),
			(SELECT count(*) FROM model_effect m WHERE m.event_id = e.event_id AND NOT m.forced),
			(SELECT COALESCE(string_agg(COALESCE(array_to_string(j.errors, ' '), ''), ' '), '') FROM river_job j
				WHERE j.kind = 'apply_event' AND j.args->>'event_id' = e.event_id)
		FROM webhook_event e`)
	w.must(err, "read the ledger")
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var (
			id, status, text, jobErrors string
			erased                      bool
			ownWaiting, live, unforced  int
			effects                     int
		)
		w.must(rows.Scan(&id, &status, &erased, &text, &ownWaiting, &live, &unforced, &effects, &jobErrors), "read the ledger")
		seen[id] = true
		applied := status == "settled"
		switch {
		case applied && effects != 1:
			w.fail("%s is settled with %d unforced effects", id, effects)
		case !applied && effects != 0:
			w.fail("%s is %s with %d unforced effects", id, status, effects)
		case status == "claimed" && live == 0 && !w.orphaned[id]:
			w.fail("%s is claimed and no live job carries it", id)
		case (status == "claimed" || status == "failed") && unforced > 1:
			w.fail("%s is %s with %d waiting jobs", id, status, unforced)
		case status == "discarded" && ownWaiting > 0:
			w.fail("%s is discarded with %d waiting jobs of its own: %s", id, ownWaiting, w.jobsOf(id))
		case status == "processing":
			w.fail("%s is processing outside an apply's transaction", id)
		}
		for _, s := range w.erased {
			if erased && (strings.Contains(text, s) || strings.Contains(jobErrors, s)) {
				w.fail("%s was erased and still holds %s", id, s)
			}
		}
	}
	w.must(rows.Err(), "read the ledger")
	for id := range w.pruned {
		if seen[id] {
			w.fail("%s was pruned and has a row", id)
		}
	}
	for id := range w.pruned {
		n := 0
		w.must(tx.QueryRow(`SELECT count(*) FROM model_effect WHERE event_id = $1 AND NOT forced`, id).Scan(&n), "read the effects")
		if n != 1 {
			w.fail("%s was pruned (settled) with %d unforced effects", id, n)
		}
	}
	for _, s := range w.erased {
		n := 0
		w.must(tx.QueryRow(`SELECT count(*) FROM model_row WHERE customer = $1`, s).Scan(&n), "read the module's rows")
		if n > 0 {
			w.fail("%d module rows still hold the erased %s", n, s)
		}
	}
}

// jobsOf describes the apply jobs of event id, for a failure's message.
func (w *walk) jobsOf(id string) string {
	return strings.Join(dbtest.Strings(w.t, w.h.DB.SQL, `SELECT concat_ws(' ', id, kind, state, attempt, args::text, metadata::text, errors::text)
		FROM river_job WHERE kind = 'apply_event' AND args->>'event_id' = $1
			OR kind = 'apply_batch' AND args->'events' @> jsonb_build_array(jsonb_build_object('event_id', $1::text))`, id), "; ")
}

func slicesContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
