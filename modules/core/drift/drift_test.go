package drift_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/modules/core/drift"
	"github.com/hookledger/hookledger/modules/core/intake"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// thing is a test module's kind: an object with a status, its rows kept
// by the module's handler of stripe thing.* events under a version guard.
type thing struct {
	mu sync.Mutex
	// objects is the provider's: id -> status; created says when each
	// was created (for since).
	objects map[string]string
	created map[string]time.Time
	// rows is hookledger's.
	rows map[string]drift.Row
	// at is when the provider is asked.
	at      time.Time
	fetched []string
	// pageSize is how many objects a list page holds.
	pageSize int
	// customers is the provider's customer of an object, when it has one.
	customers map[string]string
}

func newThing(at time.Time) *thing {
	return &thing{objects: map[string]string{}, created: map[string]time.Time{}, rows: map[string]drift.Row{}, at: at, pageSize: 2}
}

func (m *thing) store(id, status string, version int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows[id] = drift.Row{ID: id, State: drift.State{"status": status}, Version: version, At: time.Unix(version, 0)}
}

func (m *thing) row(id string) (drift.Row, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.rows[id]
	return r, ok
}

func (m *thing) Kind() string { return "thing" }

func (m *thing) object(id string) drift.Object {
	o := map[string]string{"id": id, "status": m.objects[id]}
	if c, ok := m.customers[id]; ok {
		o["customer"] = c
	}
	raw, _ := json.Marshal(o)
	return drift.Object{ID: id, State: drift.State{"status": m.objects[id]}, Raw: raw, At: m.at}
}

func (m *thing) List(_ context.Context, since time.Time, page func([]drift.Object) error) error {
	m.mu.Lock()
	var ids []string
	for id := range m.objects {
		if !m.created[id].Before(since) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var pages [][]drift.Object
	for len(ids) > 0 {
		n := min(m.pageSize, len(ids))
		var objs []drift.Object
		for _, id := range ids[:n] {
			objs = append(objs, m.object(id))
		}
		pages, ids = append(pages, objs), ids[n:]
	}
	m.mu.Unlock()
	for _, p := range pages {
		if err := page(p); err != nil {
			return err
		}
	}
	return nil
}

func (m *thing) Fetch(_ context.Context, id string) (drift.Object, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fetched = append(m.fetched, id)
	if _, ok := m.objects[id]; !ok {
		return drift.Object{}, fmt.Errorf("GET %s: %w", id, drift.ErrGone)
	}
	return m.object(id), nil
}

func (m *thing) Rows(_ context.Context, sel drift.Selection) ([]drift.Row, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []drift.Row
	if sel.IDs != nil {
		for _, id := range sel.IDs {
			if r, ok := m.rows[id]; ok {
				out = append(out, r)
			}
		}
		return out, nil
	}
	for id, r := range m.rows {
		if id > sel.After {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out[:min(len(out), sel.Limit)], nil
}

func (m *thing) Compare(row *drift.Row, obj *drift.Object) ([]drift.Diff, bool) {
	switch {
	case row == nil:
		return drift.Fields(drift.State{}, obj.State, "status"), true
	case obj == nil:
		return drift.Fields(row.State, drift.State{}, "status"), true
	}
	d := drift.Fields(row.State, obj.State, "status")
	return d, len(d) > 0
}

func (m *thing) Repair(row *drift.Row, obj *drift.Object) (drift.Repair, error) {
	if obj == nil {
		if row.State["status"] == "locked" {
			return drift.Repair{}, fmt.Errorf("%w: locked rows stay", drift.ErrCannotRepair)
		}
		raw, _ := json.Marshal(map[string]string{"id": row.ID, "status": "gone"})
		return drift.Repair{Type: "thing.deleted", Object: raw}, nil
	}
	return drift.Repair{Type: "thing.updated", Object: obj.Raw}, nil
}

// apply is the module's handler: the object's status at the event's
// created, when that is newer than the row.
func (m *thing) apply(_ context.Context, _ *ledger.Tx, ev *ledger.Event) error {
	var e struct {
		Created int64 `json:"created"`
		Data    struct {
			Object struct{ ID, Status string } `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return ledger.Permanent(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.rows[e.Data.Object.ID]; ok && r.Version >= e.Created {
		return nil
	}
	if e.Data.Object.Status == "gone" {
		e.Data.Object.Status = "ended"
	}
	m.rows[e.Data.Object.ID] = drift.Row{ID: e.Data.Object.ID, State: drift.State{"status": e.Data.Object.Status}, Version: e.Created, At: time.Unix(e.Created, 0)}
	return nil
}

// ended: the test module's Compare of an ended row that the provider lacks.
func (m *thing) endedIsInSync() *endedThing { return &endedThing{m} }

type endedThing struct{ *thing }

func (e *endedThing) Compare(row *drift.Row, obj *drift.Object) ([]drift.Diff, bool) {
	if obj == nil && row.State["status"] == "ended" {
		return nil, false
	}
	return e.thing.Compare(row, obj)
}

func ids(r *drift.Report) map[string]drift.Category {
	out := map[string]drift.Category{}
	for _, f := range r.Findings {
		out[f.ID] = f.Drift
	}
	return out
}

// TestCheckFindsEachKindOfDrift: a row in sync, one that differs, one the
// provider lacks, an object hookledger lacks; a row of the second after
// the provider's answer (an event applied since) is not compared, and a
// row dated an hour after it is ahead; only the rows the list did not
// return are fetched by id.
func TestCheckFindsEachKindOfDrift(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_800_000_000, 0)
	m := newThing(at)
	m.objects = map[string]string{"a": "active", "b": "canceled", "c": "active", "e": "active", "f": "active"}
	m.store("a", "active", at.Unix()-100)
	m.store("b", "active", at.Unix()-100)
	m.store("d", "active", at.Unix()-100)
	m.store("e", "past_due", at.Unix()+1) // an event of after the answer
	m.store("f", "active", at.Unix()+3600)

	var last drift.Counts
	r, err := drift.Check(context.Background(), drift.Options{Namespace: "stripe", Modules: []drift.Module{m},
		Progress: func(kind string, c drift.Counts) { last = c }, NowFunc: func() time.Time { return at }})
	require.NoError(t, err)
	require.Equal(t, map[string]drift.Category{"b": drift.Differs, "c": drift.MissingHere, "d": drift.MissingAtProvider, "f": drift.Ahead}, ids(r))
	require.Equal(t, []string{"d"}, m.fetched, "only the row the list did not return is fetched")
	require.Equal(t, drift.Counts{Objects: 5, Rows: 5, Matched: 4, Gone: 1, Drifted: 4}, *r.Checked["thing"])
	require.Equal(t, *r.Checked["thing"], last, "progress saw the final counts")
	require.Equal(t, map[string]int{"thing": 4}, r.Drifted())

	b := r.Findings[0]
	require.Equal(t, "b", b.ID)
	require.Equal(t, []drift.Diff{{Field: "status", Stored: "active", Provider: "canceled"}}, b.Fields)
	require.Equal(t, at.Unix()-100, b.RowVersion)
	require.True(t, at.Equal(b.ObjectAt))
	require.Nil(t, r.Findings[1].RowAt, "an object missing here has no row version")

	// --since: objects created before it are not listed, so their rows are
	// fetched by id, and compared all the same.
	m.created["a"], m.created["b"] = at.Add(-48*time.Hour), at.Add(-48*time.Hour)
	m.created["c"], m.created["e"], m.created["f"] = at, at, at
	m.fetched = nil
	r, err = drift.Check(context.Background(), drift.Options{Namespace: "stripe", Modules: []drift.Module{m}, Since: at.Add(-24 * time.Hour),
		NowFunc: func() time.Time { return at }})
	require.NoError(t, err)
	require.Equal(t, map[string]drift.Category{"b": drift.Differs, "c": drift.MissingHere, "d": drift.MissingAtProvider, "f": drift.Ahead}, ids(r))
	require.ElementsMatch(t, []string{"a", "b", "d"}, m.fetched)
}

// TestCheckPagesThroughManyRows: more stored rows than one read of them,
// none of which the provider lists, are all fetched once.
func TestCheckPagesThroughManyRows(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_800_000_000, 0)
	m := newThing(at)
	for i := range 1234 {
		id := fmt.Sprintf("r%05d", i)
		m.store(id, "active", 1)
		m.objects[id] = "active"
		m.created[id] = at.Add(-time.Hour)
	}
	r, err := drift.Check(context.Background(), drift.Options{Namespace: "stripe", Modules: []drift.Module{m}, Since: at})
	require.NoError(t, err)
	require.Empty(t, r.Findings)
	require.Len(t, m.fetched, 1234)
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(m.fetched))), 1234, "each once")
}

// TestPlanSaysWhatCannotBeRepaired: a module's refusal is the reason; rows
// the provider lacks are not ended when it has none of several of them
// (another account's key).
func TestPlanSaysWhatCannotBeRepaired(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_800_000_000, 0)
	m := newThing(at)
	m.store("x", "active", 1)
	m.store("y", "locked", 1)
	r, err := drift.Check(context.Background(), drift.Options{Namespace: "stripe", Modules: []drift.Module{m}})
	require.NoError(t, err)
	for _, o := range r.Plan(drift.StripeEvent) {
		require.Equal(t, drift.CannotRepair, o.Result)
		require.Contains(t, o.Reason, "none of the 2 stored thing rows")
	}

	m.objects["z"] = "active"
	m.store("z", "active", 1)
	r, err = drift.Check(context.Background(), drift.Options{Namespace: "stripe", Modules: []drift.Module{m}, NowFunc: func() time.Time { return at }})
	require.NoError(t, err)
	plan := r.Plan(drift.StripeEvent)
	require.Len(t, plan, 2)
	require.Equal(t, drift.Outcome{Kind: "thing", ID: "x", EventID: "drift_x_1800000000", EventType: "thing.deleted", Result: drift.WouldRepair}, strip(plan[0]))
	require.Equal(t, drift.Outcome{Kind: "thing", ID: "y", Result: drift.CannotRepair, Reason: "cannot repair: locked rows stay"}, strip(plan[1]))
}

// strip is an outcome without its unexported parts, for comparing.
func strip(o drift.Outcome) drift.Outcome {
	return drift.Outcome{Kind: o.Kind, ID: o.ID, EventID: o.EventID, EventType: o.EventType, Result: o.Result, Reason: o.Reason}
}

// TestFixClaimsReplayedEventsTheWorkersApply: each repair is a replayed
// event in the namespace's ledger, applied by the module's handler; the
// row is read again afterwards; a row an event moved past the provider's
// answer in the meantime stays where that event put it; running the same
// repairs again claims nothing new.
func TestFixClaimsReplayedEventsTheWorkersApply(t *testing.T) {
	t.Parallel()
	at := time.Unix(time.Now().Unix()-60, 0)
	m := newThing(at)
	h := ledgertest.New(t, 2, func(h *ledgertest.Harness) { h.Registry.Handle("stripe", "thing.*", m.apply) })
	m.objects = map[string]string{"a": "active", "b": "canceled", "c": "active", "n": "canceled"}
	m.store("a", "active", at.Unix()-100)
	m.store("b", "active", at.Unix()-100)
	m.store("d", "active", at.Unix()-100)
	m.store("n", "active", at.Unix()-100)
	ended := m.endedIsInSync()
	r, err := drift.Check(context.Background(), drift.Options{Namespace: "acct", Modules: []drift.Module{ended}, NowFunc: func() time.Time { return at }})
	require.NoError(t, err)
	require.Len(t, r.Findings, 4)
	plan := r.Plan(drift.StripeEvent)

	// An event of after the provider's answer reaches n before the repair.
	m.store("n", "past_due", at.Unix()+10)

	src := &intake.Source{Name: "stripe-acct", Namespace: "acct", Provider: provider.Stripe}
	out, err := drift.Fix(context.Background(), plan, drift.FixOptions{Source: src, Ledger: h.Claimer, Wait: dbtest.Patience})
	require.NoError(t, err)
	results := map[string]drift.Result{}
	for _, o := range out {
		results[o.ID] = o.Result
	}
	require.Equal(t, map[string]drift.Result{"b": drift.Repaired, "c": drift.Repaired, "d": drift.Repaired, "n": drift.Superseded}, results)
	for id, want := range map[string]string{"b": "canceled", "c": "active", "d": "ended", "n": "past_due"} {
		row, ok := m.row(id)
		require.True(t, ok)
		require.Equal(t, want, row.State["status"], id)
	}
	require.Equal(t, 4, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE namespace = 'acct' AND source = 'stripe-acct'
		AND replayed AND status = 'settled' AND event_id LIKE 'drift\_%\_`+fmt.Sprint(at.Unix())+`'`))
	require.Equal(t, 1, h.DB.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = $1
		AND event_type = 'thing.updated' AND (payload::jsonb)->'data'->'object'->>'status' = 'canceled'
		AND ((payload::jsonb)->>'created')::bigint = $2`, "drift_b_"+fmt.Sprint(at.Unix()), at.Unix()))

	again, err := drift.Fix(context.Background(), plan, drift.FixOptions{Source: src, Ledger: h.Claimer, Wait: dbtest.Patience})
	require.NoError(t, err)
	require.Len(t, again, 4)
	require.Equal(t, 4, h.DB.Count(t, `SELECT count(*) FROM webhook_event`), "the same repairs are duplicates")
	for _, o := range again {
		require.Equal(t, drift.Duplicate, o.Result, o.ID)
	}

	// A new check asks the provider again, after the change whose event
	// moved n.
	m.mu.Lock()
	m.at, m.objects["n"] = time.Unix(time.Now().Unix(), 0), "past_due"
	m.mu.Unlock()
	r, err = drift.Check(context.Background(), drift.Options{Namespace: "acct", Modules: []drift.Module{ended}})
	require.NoError(t, err)
	require.Empty(t, r.Findings)
}

// TestFixWithoutWorkersLeavesRepairsPending: with no worker to apply them,
// the repairs are claimed and said to be pending once the wait is over.
func TestFixWithoutWorkersLeavesRepairsPending(t *testing.T) {
	t.Parallel()
	at := time.Unix(time.Now().Unix(), 0)
	m := newThing(at)
	h := ledgertest.New(t, 0, func(h *ledgertest.Harness) { h.Registry.Handle("stripe", "thing.*", m.apply) })
	m.objects["a"] = "active"
	r, err := drift.Check(context.Background(), drift.Options{Namespace: "stripe", Modules: []drift.Module{m}})
	require.NoError(t, err)
	src := &intake.Source{Name: "stripe", Namespace: "stripe", Provider: provider.Stripe}
	out, err := drift.Fix(context.Background(), r.Plan(drift.StripeEvent), drift.FixOptions{Source: src, Ledger: h.Claimer, Wait: time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, drift.Pending, out[0].Result)
	require.True(t, out[0].Remains())
	require.Equal(t, "claimed", h.Row(t, "stripe", out[0].EventID).Status)
}

// TestScheduledCheckExportsTheCounts: the drift_check job checks the
// namespace and sets hookledger_drift_objects for every kind.
func TestScheduledCheckExportsTheCounts(t *testing.T) {
	t.Parallel()
	m := newThing(time.Unix(1_800_000_000, 0))
	m.objects = map[string]string{"a": "active", "b": "active"}
	m.store("a", "active", 1)
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		drift.RegisterSchedule(h.Registry, drift.ScheduleConfig{Provider: "stripe", Namespace: "stripe", Modules: []drift.Module{m},
			Interval: time.Hour, Metrics: h.Metrics, Logger: zap.NewNop()})
	})
	dbtest.Eventually(t, func() bool {
		return h.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'drift_check' AND state = 'completed'`) == 1
	})
	require.Equal(t, 1.0, testutil.ToFloat64(h.Metrics.DriftObjects.WithLabelValues("thing")))
}

// TestFixReportsARepairWhoseClaimWasADuplicate: someone claimed the
// repair's predictable event id first, with another object; the repair
// is reported as a duplicate claim, not as applied or unchanged, and the
// drift remains.
func TestFixReportsARepairWhoseClaimWasADuplicate(t *testing.T) {
	t.Parallel()
	at := time.Unix(time.Now().Unix()-60, 0)
	m := newThing(at)
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) { h.Registry.Handle("stripe", "thing.*", m.apply) })
	m.objects["a"] = "canceled"
	m.store("a", "active", at.Unix()-100)
	r, err := drift.Check(context.Background(), drift.Options{Namespace: "stripe", Modules: []drift.Module{m}, NowFunc: func() time.Time { return at }})
	require.NoError(t, err)
	plan := r.Plan(drift.StripeEvent)
	require.Len(t, plan, 1)

	first, err := drift.StripeEvent(plan[0].EventID, "thing.updated", at, json.RawMessage(`{"id":"a","status":"hijacked"}`))
	require.NoError(t, err)
	require.NoError(t, h.Deliver(t, "stripe", plan[0].EventID, "thing.updated", first))
	h.WaitSettled(t, "stripe", plan[0].EventID)

	src := &intake.Source{Name: "stripe", Namespace: "stripe", Provider: provider.Stripe}
	out, err := drift.Fix(context.Background(), plan, drift.FixOptions{Source: src, Ledger: h.Claimer, Wait: dbtest.Patience})
	require.NoError(t, err)
	require.Equal(t, drift.Result("duplicate"), out[0].Result, out[0].Reason)
	require.Contains(t, out[0].Reason, plan[0].EventID)
	require.True(t, out[0].Remains())
}

// TestCheckReportsErasedSubjectsApart: after an erase, a row the module
// redacted and an object of the erased customer hookledger lacks are
// reported apart, without their fields, and planned no repair; a repair
// planned before the erase is not claimed; a finding whose row a replayed
// event wrote is marked.
func TestCheckReportsErasedSubjectsApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	at := time.Unix(time.Now().Unix(), 0)
	m := newThing(at)
	m.customers = map[string]string{"r": "cus_gone", "o": "cus_gone", "k": "cus_kept", "late": "cus_late"}
	h := ledgertest.New(t, 0, nil)
	m.objects = map[string]string{"r": "canceled", "o": "active", "k": "active", "late": "active", "p": "canceled"}
	m.rows["r"] = drift.Row{ID: "r", State: drift.State{"status": "active", "customer": ledger.Erased}, Version: at.Unix() - 100, At: at.Add(-100 * time.Second)}
	m.rows["p"] = drift.Row{ID: "p", State: drift.State{"status": "active"}, Version: at.Unix() - 100, At: at.Add(-100 * time.Second), EventID: "evt_replayed"}
	_, err := h.Claimer.Claim(ctx, ledger.Claim{Namespace: "stripe", EventID: "evt_replayed", Provider: "stripe", Source: "stripe",
		Type: "thing.updated", Payload: []byte(`{}`), Replayed: true})
	require.NoError(t, err)

	before, err := drift.Check(ctx, drift.Options{Namespace: "stripe", Modules: []drift.Module{m}, Ledger: h.DB.SQL})
	require.NoError(t, err)
	planned := before.Plan(drift.StripeEvent)

	_, err = h.Claimer.Erase(ctx, "cus_gone", "stripe", false)
	require.NoError(t, err)
	_, err = h.Claimer.Erase(ctx, "cus_late", "", false)
	require.NoError(t, err)
	r, err := drift.Check(ctx, drift.Options{Namespace: "stripe", Modules: []drift.Module{m}, Ledger: h.DB.SQL})
	require.NoError(t, err)
	require.Equal(t, map[string]drift.Category{"k": drift.MissingHere, "p": drift.Differs}, ids(r))
	require.True(t, r.Findings[1].Replayed, "p's row was written by a replayed event")
	require.False(t, r.Findings[0].Replayed)
	require.Len(t, r.Erased, 3)
	for i, want := range []struct {
		id string
		c  drift.Category
	}{{"late", drift.MissingHere}, {"o", drift.MissingHere}, {"r", drift.Differs}} {
		require.Equal(t, want.id, r.Erased[i].ID)
		require.Equal(t, want.c, r.Erased[i].Drift)
		require.Nil(t, r.Erased[i].Fields, "the fields would show the subject")
	}
	require.Equal(t, drift.Counts{Objects: 5, Rows: 2, Matched: 2, Drifted: 2, Erased: 3}, *r.Checked["thing"])
	for _, o := range r.Plan(drift.StripeEvent) {
		require.Contains(t, []string{"k", "p"}, o.ID)
	}
	other, err := drift.Check(ctx, drift.Options{Namespace: "other", Modules: []drift.Module{m}, Ledger: h.DB.SQL})
	require.NoError(t, err)
	require.Equal(t, map[string]drift.Category{"k": drift.MissingHere, "o": drift.MissingHere, "p": drift.Differs}, ids(other),
		"cus_gone was erased in stripe only, cus_late everywhere; r's row is redacted")

	src := &intake.Source{Name: "stripe", Namespace: "stripe", Provider: provider.Stripe}
	out, err := drift.Fix(ctx, planned, drift.FixOptions{Source: src, Ledger: h.Claimer})
	require.NoError(t, err)
	results := map[string]drift.Result{}
	for _, o := range out {
		results[o.ID] = o.Result
	}
	require.Equal(t, map[string]drift.Result{"o": drift.ErasedSubject, "late": drift.ErasedSubject,
		"k": drift.Pending, "p": drift.Pending}, results)
	require.Zero(t, h.DB.Count(t, `SELECT count(*) FROM webhook_event e WHERE strpos(e::text, 'cus_gone') > 0 OR strpos(e::text, 'cus_late') > 0`))
}
