package subscription_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/ent"
	entsub "github.com/hookledger/hookledger/ent/subscription"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/metrics"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/features/subscription"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

type fixture struct {
	*ledgertest.Harness
	metrics *metrics.Set
}

func setup(t *testing.T) *fixture {
	t.Helper()
	return setupWorkers(t, 0)
}

// setupWorkers is setup with River working jobs.
func setupWorkers(t *testing.T, workers int) *fixture {
	t.Helper()
	h := ledgertest.New(t, workers, func(h *ledgertest.Harness) {
		subscription.Register(h.Registry, subscription.Config{Metrics: h.Metrics})
	})
	return &fixture{Harness: h, metrics: h.Metrics}
}

// deliver claims a Stripe event and applies it, as the worker would.
func (f *fixture) deliver(t *testing.T, body []byte) error {
	t.Helper()
	var ev struct{ ID, Type string }
	require.NoError(t, json.Unmarshal(body, &ev))
	return f.Deliver(t, "stripe", ev.ID, ev.Type, body)
}

func (f *fixture) sub(t *testing.T, id string) *ent.Subscription {
	t.Helper()
	return f.subOf(t, "stripe", id)
}

func (f *fixture) subOf(t *testing.T, provider, id string) *ent.Subscription {
	t.Helper()
	client := f.DB.Ent()
	s, err := client.Subscription.Query().Where(entsub.Namespace(provider), entsub.Provider(provider), entsub.ExternalID(id)).Only(context.Background())
	require.NoError(t, err)
	return s
}

// event is a Stripe subscription event with an id of its own: tests that
// run in parallel share no counter.
func event(typ, sub, status string, created int64) []byte {
	return []byte(fmt.Sprintf(`{"id":"evt_%s","object":"event","type":%q,"created":%d,"data":{"object":{"id":%q,"customer":"cus_1","status":%q,"items":{"data":[{"price":{"id":"price_basic"}}]}}}}`,
		rand.Text(), typ, created, sub, status))
}

func TestNewestFirstEndsWithNewest(t *testing.T) {
	t.Parallel()
	f := setup(t)
	evs := [][]byte{
		event("customer.subscription.updated", "sub_1", "active", 300),
		event("customer.subscription.updated", "sub_1", "past_due", 200),
		event("customer.subscription.created", "sub_1", "incomplete", 100),
	}
	for _, e := range evs {
		require.NoError(t, f.deliver(t, e))
	}
	s := f.sub(t, "sub_1")
	require.Equal(t, "active", s.Status)
	require.Equal(t, int64(300), s.Version)
	require.Equal(t, "cus_1", s.CustomerID)
	require.Equal(t, "price_basic", s.Plan)
	require.Equal(t, 2.0, testutil.ToFloat64(f.metrics.StaleSkipped.WithLabelValues("subscription")))
}

func TestUpdatedBeforeCreated(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.deliver(t, event("customer.subscription.updated", "sub_2", "past_due", 200)))
	s := f.sub(t, "sub_2")
	require.Equal(t, "past_due", s.Status, "an update that arrives first creates the row")
	require.NoError(t, f.deliver(t, event("customer.subscription.created", "sub_2", "active", 100)))
	s = f.sub(t, "sub_2")
	require.Equal(t, "past_due", s.Status)
	require.Equal(t, int64(200), s.Version)
}

func TestDeletedCancels(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.deliver(t, event("customer.subscription.created", "sub_3", "active", 100)))
	require.NoError(t, f.deliver(t, event("customer.subscription.deleted", "sub_3", "active", 150)))
	require.Equal(t, "canceled", f.sub(t, "sub_3").Status)
	require.NoError(t, f.deliver(t, event("customer.subscription.updated", "sub_3", "active", 120)))
	require.Equal(t, "canceled", f.sub(t, "sub_3").Status, "a stale update never revives a canceled subscription")
}

// TestEqualVersionRule: created and updated of one subscription in the same
// second. Whatever the arrival order, the state further along the lifecycle
// wins, then the later event type; a full tie keeps the stored row.
func TestEqualVersionRule(t *testing.T) {
	t.Parallel()
	for _, order := range []string{"created first", "updated first"} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			created := event("customer.subscription.created", "sub_t", "active", 500)
			updated := event("customer.subscription.updated", "sub_t", "past_due", 500)
			evs := [][]byte{created, updated}
			if order == "updated first" {
				evs = [][]byte{updated, created}
			}
			for _, e := range evs {
				require.NoError(t, f.deliver(t, e))
			}
			require.Equal(t, "past_due", f.sub(t, "sub_t").Status)
			require.Equal(t, 1.0, testutil.ToFloat64(f.metrics.VersionTies.WithLabelValues("subscription", map[string]string{
				"created first": "applied", "updated first": "kept"}[order])))
		})
	}
	t.Run("terminal status wins a tie", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		require.NoError(t, f.deliver(t, event("customer.subscription.deleted", "sub_d", "canceled", 700)))
		require.NoError(t, f.deliver(t, event("customer.subscription.updated", "sub_d", "active", 700)))
		require.Equal(t, "canceled", f.sub(t, "sub_d").Status)
	})
	t.Run("full tie keeps the stored state", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		first := event("customer.subscription.updated", "sub_f", "active", 800)
		require.NoError(t, f.deliver(t, first))
		require.NoError(t, f.deliver(t, event("customer.subscription.updated", "sub_f", "active", 800)))
		var firstID struct{ ID string }
		require.NoError(t, json.Unmarshal(first, &firstID))
		require.Equal(t, firstID.ID, f.sub(t, "sub_f").EventID)
	})
}

// TestStripeFixturesInAnyOrder applies Stripe's composed created, updated
// and deleted events (testdata/providers/stripe) newest first.
func TestStripeFixturesInAnyOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, name := range []string{"deleted", "updated", "created"} {
		body, err := os.ReadFile("../../../testdata/providers/stripe/customer.subscription." + name + ".json")
		require.NoError(t, err)
		require.NoError(t, f.deliver(t, body))
	}
	s := f.sub(t, "sub_1Pgc6rB7WZ01zgkWNy0Cn5nw")
	require.Equal(t, "canceled", s.Status)
	require.Equal(t, int64(1234568020), s.Version)
	require.Equal(t, "price_1PgafmB7WZ01zgkW6dKueIc5", s.Plan)
	require.Equal(t, "cus_QXg1o8vcGmoR32", s.CustomerID)
}

func TestPoisonPayloadIsPermanent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	err := f.deliver(t, []byte(`{"id":"evt_bad","type":"customer.subscription.updated","created":5,"data":{"object":{}}}`))
	require.Error(t, err)
	require.True(t, ledger.IsPermanent(err))
}

// TestPaddleOutOfOrder delivers Paddle's later update of a subscription
// before its earlier one: the earlier one must not win.
func TestPaddleOutOfOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, file := range []string{
		"subscription.updated.evt_01hg0trvbgjfp0avfam8a2yzq1.json",
		"subscription.updated.evt_01hg0trpmmdkkdbk4p8czp4drm.json",
	} {
		body, err := os.ReadFile("../../../testdata/providers/paddle/" + file)
		require.NoError(t, err)
		var ev struct {
			EventID   string `json:"event_id"`
			EventType string `json:"event_type"`
		}
		require.NoError(t, json.Unmarshal(body, &ev))
		require.NoError(t, f.Deliver(t, "paddle", ev.EventID, ev.EventType, body))
	}
	s := f.subOf(t, "paddle", "sub_01gyssnczp81czs49zcprm6hfv")
	require.Equal(t, int64(1700835126640975), s.Version, "occurred_at of the later event, in microseconds")
	require.Equal(t, "evt_01hg0trvbgjfp0avfam8a2yzq1", s.EventID)
	require.Equal(t, "past_due", s.Status)
	require.Equal(t, "ctm_01gyssmfx5rnmk4dt8qx88v0ee", s.CustomerID)
	require.Equal(t, "pri_01gsz8x8sawmvhz1pv30nge1ke", s.Plan)
	require.Equal(t, 1.0, testutil.ToFloat64(f.metrics.StaleSkipped.WithLabelValues("subscription")))
}

// TestTieRefetchedFromStripe: with an API key, two events of one second are
// resolved by Stripe's current state of the subscription.
func TestTieRefetchedFromStripe(t *testing.T) {
	t.Parallel()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sk_test_tie" || r.URL.Path != "/v1/subscriptions/sub_tie" {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte(`{"id":"sub_tie","object":"subscription","customer":"cus_1","status":"unpaid","items":{"data":[{"price":{"id":"price_pro"}}]}}`))
	}))
	defer api.Close()
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		subscription.Register(h.Registry, subscription.Config{DB: h.DB.SQL, Metrics: h.Metrics, StripeAPI: provider.StripeAPI{Base: api.URL, Key: "sk_test_tie", HTTP: api.Client()}})
	})
	f := &fixture{Harness: h, metrics: h.Metrics}
	require.NoError(t, f.deliver(t, event("customer.subscription.created", "sub_tie", "active", 900)))
	require.NoError(t, f.deliver(t, event("customer.subscription.updated", "sub_tie", "past_due", 900)))
	require.Equal(t, "past_due", f.sub(t, "sub_tie").Status, "the tie rule first; Stripe's answer in a job of its own")
	// The job counts the re-fetch after its write commits: wait for both.
	refetched := f.metrics.VersionTies.WithLabelValues("subscription", "refetched")
	dbtest.Eventually(t, func() bool {
		return f.sub(t, "sub_tie").Status == "unpaid" && testutil.ToFloat64(refetched) == 1
	}, "Stripe's current state, not either event's, and the re-fetch counted")
	s := f.sub(t, "sub_tie")
	require.Equal(t, "price_pro", s.Plan)
	require.Equal(t, int64(900), s.Version, "at the tied version, so a later event still wins")
	require.NoError(t, f.deliver(t, event("customer.subscription.updated", "sub_tie", "active", 901)))
	require.Equal(t, "active", f.sub(t, "sub_tie").Status)
}

// TestConcurrentTieIsDetected: two same-second updates applied by two
// workers at once. The second waits on the first's row lock; the tie rule
// must see the first's committed state, whatever the interleaving.
func TestConcurrentTieIsDetected(t *testing.T) {
	t.Parallel()
	for _, order := range []string{"higher first", "lower first"} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			require.NoError(t, f.deliver(t, event("customer.subscription.created", "sub_c", "trialing", 900)))
			high := event("customer.subscription.updated", "sub_c", "past_due", 1000)
			low := event("customer.subscription.updated", "sub_c", "active", 1000)
			first, second := high, low
			if order == "lower first" {
				first, second = low, high
			}
			ids := make([]string, 2)
			for i, body := range [][]byte{first, second} {
				var ev struct{ ID, Type string }
				require.NoError(t, json.Unmarshal(body, &ev))
				f.Claim(t, "stripe", ev.ID, ev.Type, body)
				ids[i] = ev.ID
			}
			ctx := context.Background()
			applied := make(chan struct{})
			release := make(chan struct{})
			firstDone := make(chan error, 1)
			go func() {
				firstDone <- ledger.InTx(ctx, f.DB.SQL, func(tx *ledger.Tx) error {
					_, _, err := ledger.Apply(ctx, tx, f.Registry, ledger.ApplyArgs{Namespace: "stripe", EventID: ids[0]})
					close(applied)
					<-release
					return err
				})
			}()
			<-applied
			secondDone := make(chan error, 1)
			go func() {
				secondDone <- ledger.InTx(ctx, f.DB.SQL, func(tx *ledger.Tx) error {
					_, _, err := ledger.Apply(ctx, tx, f.Registry, ledger.ApplyArgs{Namespace: "stripe", EventID: ids[1]})
					return err
				})
			}()
			// The second apply is truly concurrent: it waits on the first's lock.
			dbtest.Eventually(t, func() bool {
				return f.DB.Count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 1
			})
			close(release)
			require.NoError(t, <-firstDone)
			require.NoError(t, <-secondDone)

			require.Equal(t, "past_due", f.sub(t, "sub_c").Status, "the higher precedence wins")
			ties := testutil.ToFloat64(f.metrics.VersionTies.WithLabelValues("subscription", "applied")) +
				testutil.ToFloat64(f.metrics.VersionTies.WithLabelValues("subscription", "kept"))
			require.Equal(t, 1.0, ties, "the tie is counted")
		})
	}
}

// TestRefetchNotFoundKeepsTheTieRule: Stripe answering 404 for the
// subscription is permanent: the re-fetch ends at once and the tie rule's
// state stands; Stripe unreachable retries instead.
func TestRefetchNotFoundKeepsTheTieRule(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, `{"error":{"type":"invalid_request_error"}}`, http.StatusNotFound)
	}))
	defer api.Close()
	h := ledgertest.New(t, 1, func(h *ledgertest.Harness) {
		subscription.Register(h.Registry, subscription.Config{DB: h.DB.SQL, Metrics: h.Metrics, StripeAPI: provider.StripeAPI{Base: api.URL, Key: "sk_test_404", HTTP: api.Client()}})
	})
	f := &fixture{Harness: h, metrics: h.Metrics}
	require.NoError(t, f.deliver(t, event("customer.subscription.created", "sub_gone", "active", 950)))
	require.NoError(t, f.deliver(t, event("customer.subscription.updated", "sub_gone", "past_due", 950)))
	dbtest.Eventually(t, func() bool {
		return f.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'subscription_refetch' AND state = 'cancelled'`) == 1
	})
	require.Equal(t, int32(1), calls.Load(), "a 404 is not retried")
	require.Equal(t, "past_due", f.sub(t, "sub_gone").Status)
	require.Equal(t, 1.0, testutil.ToFloat64(f.metrics.VersionTies.WithLabelValues("subscription", "refetch_refused")))
}

// TestNamespacesKeepTheirOwnSubscriptions: a second account's source (its
// own namespace) never changes the first account's subscription, even for
// the same subscription id.
func TestNamespacesKeepTheirOwnSubscriptions(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	deliverIn := func(ns string, body []byte) {
		var ev struct{ ID, Type string }
		require.NoError(t, json.Unmarshal(body, &ev))
		_, err := f.Claimer.Claim(ctx, ledger.Claim{Namespace: ns, EventID: ev.ID, Provider: "stripe", Source: ns, Type: ev.Type, Payload: body})
		require.NoError(t, err)
		require.NoError(t, f.Apply(t, ns, ev.ID, false))
	}
	deliverIn("stripe", event("customer.subscription.updated", "sub_ns", "active", 1100))
	deliverIn("stripe-eu", event("customer.subscription.deleted", "sub_ns", "canceled", 1200))
	client := f.DB.Ent()
	main, err := client.Subscription.Query().Where(entsub.Namespace("stripe"), entsub.ExternalID("sub_ns")).Only(ctx)
	require.NoError(t, err)
	require.Equal(t, "active", main.Status)
	other, err := client.Subscription.Query().Where(entsub.Namespace("stripe-eu"), entsub.ExternalID("sub_ns")).Only(ctx)
	require.NoError(t, err)
	require.Equal(t, "canceled", other.Status)
}

// TestBatchWritesAsOneByOne: a batch's subscription states are written in
// one go, and the result is that of writing them one by one in the order
// the batch applies them (key order): the same rows, the same stale and
// tie counts. The batch holds ties, full ties, stale events, a new row and
// a row stored before the batch.
func TestBatchWritesAsOneByOne(t *testing.T) {
	t.Parallel()
	before := event("customer.subscription.created", "sub_d", "active", 400)
	batch := [][]byte{
		event("customer.subscription.created", "sub_a", "active", 100),
		event("customer.subscription.updated", "sub_a", "past_due", 100),
		event("customer.subscription.updated", "sub_a", "active", 90),
		event("customer.subscription.deleted", "sub_a", "canceled", 110),
		event("customer.subscription.updated", "sub_b", "active", 200),
		event("customer.subscription.updated", "sub_b", "active", 200),
		event("customer.subscription.created", "sub_b", "trialing", 150),
		event("customer.subscription.created", "sub_c", "active", 300),
		event("customer.subscription.updated", "sub_d", "trialing", 400),
		event("customer.subscription.updated", "sub_d", "past_due", 401),
	}
	type parsed struct{ ID, Type string }
	events := make([]ledgertest.BatchEvent, len(batch))
	for i, body := range batch {
		var p parsed
		require.NoError(t, json.Unmarshal(body, &p))
		events[i] = ledgertest.BatchEvent{ID: p.ID, Type: p.Type, Payload: body}
	}
	// The batch applies in key order; one by one runs in the same order.
	slices.SortFunc(events, func(a, b ledgertest.BatchEvent) int { return strings.Compare(a.ID, b.ID) })

	outcome := func(f *fixture) string {
		var out []string
		for _, id := range []string{"sub_a", "sub_b", "sub_c", "sub_d"} {
			s := f.sub(t, id)
			out = append(out, fmt.Sprintf("%s %s v%d r%d %s %s %s", id, s.Status, s.Version, s.Rank, s.EventID, s.Plan, s.CustomerID))
		}
		out = append(out, fmt.Sprintf("stale %v ties kept %v applied %v",
			testutil.ToFloat64(f.metrics.StaleSkipped.WithLabelValues("subscription")),
			testutil.ToFloat64(f.metrics.VersionTies.WithLabelValues("subscription", "kept")),
			testutil.ToFloat64(f.metrics.VersionTies.WithLabelValues("subscription", "applied"))))
		return strings.Join(out, "\n")
	}

	one := setup(t)
	require.NoError(t, one.deliver(t, before))
	for _, ev := range events {
		require.NoError(t, one.deliver(t, ev.Payload))
	}

	all := setupWorkers(t, 2)
	require.NoError(t, all.deliver(t, before))
	all.InsertBatch(t, "stripe", events...)
	for _, ev := range events {
		all.WaitSettled(t, "stripe", ev.ID)
	}
	ids := make([]string, len(events))
	for i, ev := range events {
		ids[i] = ev.ID
	}
	require.Zero(t, all.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event' AND args->>'event_id' = ANY($1)`, ids),
		"applied as one batch, not split")
	require.Equal(t, outcome(one), outcome(all))
	require.Contains(t, outcome(all), "sub_a canceled v110")
	require.Contains(t, outcome(all), "sub_d past_due v401")
}

// TestConcurrentBatchesOfNewSubscriptions: batches that meet over
// subscriptions no row holds yet (a backlog of new customers, drained by
// several workers) each insert some, find others inserted by a batch that
// committed meanwhile, and meet batches that began after it; none may
// deadlock, and every subscription ends at its newest state.
func TestConcurrentBatchesOfNewSubscriptions(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	handlers := f.Registry.Handlers("stripe", "customer.subscription.updated")
	require.NotEmpty(t, handlers)
	const waves, workers, batches, subs, batch = 8, 4, 3, 60, 40
	apply := func(wave, version int, keys []int) error {
		return ledger.InTx(ctx, f.DB.SQL, func(tx *ledger.Tx) error {
			for _, i := range keys {
				body := event("customer.subscription.updated", fmt.Sprintf("sub_new_%d_%d", wave, i), "active", int64(version))
				var ev struct{ ID string }
				if err := json.Unmarshal(body, &ev); err != nil {
					return err
				}
				e := &ledger.Event{Namespace: "stripe", EventID: ev.ID, Provider: "stripe", Source: "stripe",
					Type: "customer.subscription.updated", Payload: body}
				for _, h := range handlers {
					if err := h(ctx, tx, e); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	for w := range waves {
		start := make(chan struct{})
		errs := make(chan error, workers)
		var mu sync.Mutex
		newest := map[string]int{}
		for g := range workers {
			go func() {
				<-start
				for b := range batches {
					version, keys := 1000+b*workers+g, mrand.Perm(subs)[:batch]
					if err := apply(w, version, keys); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					for _, i := range keys {
						id := fmt.Sprintf("sub_new_%d_%d", w, i)
						newest[id] = max(newest[id], version)
					}
					mu.Unlock()
				}
				errs <- nil
			}()
		}
		close(start)
		for range workers {
			require.NoError(t, <-errs, "wave %d", w)
		}
		for id, version := range newest {
			require.Equal(t, int64(version), f.sub(t, id).Version, "wave %d: %s at its newest state", w, id)
		}
	}
}

// TestCaseVariantKeysReadAsSQLReadsThem: a subscription event whose object
// holds "status" and "Status" is applied with what
// payload::jsonb->'data'->'object'->>'status' says, not the case variant.
func TestCaseVariantKeysReadAsSQLReadsThem(t *testing.T) {
	t.Parallel()
	f := setup(t)
	body := []byte(`{"id":"evt_case","object":"event","type":"customer.subscription.updated","created":100,` +
		`"data":{"object":{"id":"sub_case","customer":"cus_1","status":"active","Status":"canceled","items":{"data":[{"price":{"id":"price_basic"}}]}}}}`)
	require.NoError(t, f.deliver(t, body))
	var sqlSays string
	require.NoError(t, f.DB.SQL.QueryRow(`SELECT payload::jsonb->'data'->'object'->>'status' FROM webhook_event WHERE event_id = 'evt_case'`).Scan(&sqlSays))
	require.Equal(t, "active", sqlSays)
	require.Equal(t, sqlSays, f.sub(t, "sub_case").Status)
}
