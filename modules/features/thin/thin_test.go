package thin_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/migrations"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
	"github.com/hookledger/hookledger/modules/features/thin"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// fakeStripe serves objects and v2 events by path, as Stripe's API does,
// and records what it was asked.
type fakeStripe struct {
	*httptest.Server
	mu       sync.Mutex
	bodies   map[string]string // path -> JSON
	outages  int               // answers 503 to this many requests first
	refuse   bool              // answers 401 (a key Stripe refuses) while set
	requests []request
}

type request struct{ path, auth, context string }

func newFakeStripe(t *testing.T, bodies map[string]string) *fakeStripe {
	f := &fakeStripe{bodies: bodies}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.requests = append(f.requests, request{r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Stripe-Context")})
		if f.refuse {
			http.Error(w, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}`, http.StatusUnauthorized)
			return
		}
		if f.outages > 0 {
			f.outages--
			http.Error(w, `{"error":{"message":"unavailable"}}`, http.StatusServiceUnavailable)
			return
		}
		body, ok := f.bodies[r.URL.Path]
		if !ok {
			http.Error(w, `{"error":{"code":"resource_missing"}}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeStripe) seen() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.requests...)
}

// applied records what the snapshot type's handler was given.
type applied struct {
	mu  sync.Mutex
	evs []ledger.Event
}

func (a *applied) handle(_ context.Context, _ *ledger.Tx, ev *ledger.Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.evs = append(a.evs, *ev)
	return nil
}

func (a *applied) all() []ledger.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]ledger.Event(nil), a.evs...)
}

type fixture struct {
	*ledgertest.Harness
	api     *fakeStripe
	applied *applied
}

func setup(t *testing.T, key string, bodies map[string]string) *fixture {
	t.Helper()
	f := &fixture{api: newFakeStripe(t, bodies), applied: &applied{}}
	f.Harness = ledgertest.New(t, 2, func(h *ledgertest.Harness) {
		h.Registry.Handle("stripe", "customer.subscription.updated", f.applied.handle)
		thin.Register(h.Registry, thin.Config{API: provider.StripeAPI{Base: f.api.URL, Key: key}})
	})
	return f
}

// jobState waits for the event's apply job to reach a final state.
func (f *fixture) jobState(t *testing.T, eventID string) (state string, attempt int) {
	t.Helper()
	dbtest.Eventually(t, func() bool {
		err := f.DB.SQL.QueryRow(`SELECT state, attempt FROM river_job WHERE kind = 'apply_event' AND args->>'event_id' = $1
			ORDER BY id DESC LIMIT 1`, eventID).Scan(&state, &attempt)
		return err == nil && (state == "completed" || state == "cancelled" || state == "discarded")
	}, "apply job of %s never finished", eventID)
	return state, attempt
}

const subscriptionJSON = `{"id":"sub_1","object":"subscription","customer":"cus_1","status":"active","items":{"data":[{"price":{"id":"price_1"}}]}}`

func thinEvent(id, typ, extra string) []byte {
	return []byte(`{"id":"` + id + `","object":"v2.core.event","type":"` + typ + `","livemode":false,"created":"2026-03-01T10:00:00.250Z",` + extra + `}`)
}

const relatedSub = `"related_object":{"id":"sub_1","type":"subscription","url":"/v1/subscriptions/sub_1"}`

func TestThinEventIsAppliedAsItsSnapshot(t *testing.T) {
	t.Parallel()
	f := setup(t, "sk_test_thin", map[string]string{"/v1/subscriptions/sub_1": subscriptionJSON})
	f.Claim(t, "stripe", "evt_thin_1", "v1.customer.subscription.updated",
		thinEvent("evt_thin_1", "v1.customer.subscription.updated", `"context":"acct_9",`+relatedSub))
	f.WaitSettled(t, "stripe", "evt_thin_1")
	state, _ := f.jobState(t, "evt_thin_1")
	require.Equal(t, "completed", state)

	evs := f.applied.all()
	require.Len(t, evs, 1)
	require.Equal(t, "customer.subscription.updated", evs[0].Type)
	require.Equal(t, "evt_thin_1", evs[0].EventID)
	require.Equal(t, time.Date(2026, 3, 1, 10, 0, 0, 250e6, time.UTC), evs[0].OccurredAt.UTC(), "created kept to the millisecond")
	var snap struct {
		Type    string `json:"type"`
		Created int64  `json:"created"`
		Data    struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(evs[0].Payload, &snap))
	require.Equal(t, time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC).Unix(), snap.Created, "the snapshot's version unit: seconds")
	require.JSONEq(t, subscriptionJSON, string(snap.Data.Object))
	require.Equal(t, []request{{"/v1/subscriptions/sub_1", "Bearer sk_test_thin", "acct_9"}}, f.api.seen())
}

func TestThinEventWithoutRelatedObjectReadsTheEvent(t *testing.T) {
	t.Parallel()
	f := setup(t, "sk_test_thin", map[string]string{
		"/v2/core/events/evt_thin_2": string(thinEvent("evt_thin_2", "v1.customer.subscription.updated", `"context":null,`+relatedSub)),
		"/v1/subscriptions/sub_1":    subscriptionJSON,
	})
	f.Claim(t, "stripe", "evt_thin_2", "v1.customer.subscription.updated", thinEvent("evt_thin_2", "v1.customer.subscription.updated", `"context":null`))
	state, _ := f.jobState(t, "evt_thin_2")
	require.Equal(t, "completed", state)
	require.Len(t, f.applied.all(), 1)
	paths := []string{}
	for _, r := range f.api.seen() {
		paths = append(paths, r.path)
		require.Empty(t, r.context, "no Stripe-Context without a context")
	}
	require.Equal(t, []string{"/v2/core/events/evt_thin_2", "/v1/subscriptions/sub_1"}, paths)
}

func TestThinFetchRetriesAnOutage(t *testing.T) {
	t.Parallel()
	f := setup(t, "sk_test_thin", map[string]string{"/v1/subscriptions/sub_1": subscriptionJSON})
	f.api.mu.Lock()
	f.api.outages = 2
	f.api.mu.Unlock()
	f.Claim(t, "stripe", "evt_thin_3", "v1.customer.subscription.updated", thinEvent("evt_thin_3", "v1.customer.subscription.updated", relatedSub))
	state, attempt := f.jobState(t, "evt_thin_3")
	require.Equal(t, "completed", state)
	require.Equal(t, 3, attempt, "two 503s, then the object")
	require.Len(t, f.applied.all(), 1)
}

// TestThinFetchNotFoundIsPermanent: an object Stripe does not have fails
// the thin event for good, with the reason on its row: it never settles
// with nothing applied.
func TestThinFetchNotFoundIsPermanent(t *testing.T) {
	t.Parallel()
	f := setup(t, "sk_test_thin", map[string]string{})
	f.Claim(t, "stripe", "evt_thin_4", "v1.customer.subscription.updated", thinEvent("evt_thin_4", "v1.customer.subscription.updated", relatedSub))
	state, attempt := f.jobState(t, "evt_thin_4")
	require.Equal(t, "cancelled", state)
	require.Equal(t, 1, attempt)
	require.Empty(t, f.applied.all())
	row := f.Row(t, "stripe", "evt_thin_4")
	require.Equal(t, "failed", row.Status, "the fetch's outcome is the event's")
	require.Contains(t, row.LastError.String, "404")
}

// TestThinFetchWithARefusedKeyRetriesAndRecovers: a key Stripe refuses
// (401, as after a rotation) fails the thin event with the reason and
// River retries it; once the key works again the event is applied.
func TestThinFetchWithARefusedKeyRetriesAndRecovers(t *testing.T) {
	t.Parallel()
	f := setup(t, "sk_test_thin", map[string]string{"/v1/subscriptions/sub_1": subscriptionJSON})
	f.api.mu.Lock()
	f.api.refuse = true
	f.api.mu.Unlock()
	f.Claim(t, "stripe", "evt_thin_7", "v1.customer.subscription.updated", thinEvent("evt_thin_7", "v1.customer.subscription.updated", relatedSub))
	dbtest.Eventually(t, func() bool {
		return f.DB.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event' AND state = 'retryable'
			AND args->>'event_id' = 'evt_thin_7'`) == 1
	}, "the refused fetch is a River error that will be retried")
	row := f.Row(t, "stripe", "evt_thin_7")
	require.Equal(t, "failed", row.Status)
	require.Contains(t, row.LastError.String, "401")
	require.Empty(t, f.applied.all())

	f.api.mu.Lock()
	f.api.refuse = false
	f.api.mu.Unlock()
	f.WaitSettled(t, "stripe", "evt_thin_7")
	require.Len(t, f.applied.all(), 1)
}

func TestThinEventWithItsTwinInTheLedgerFetchesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, "sk_test_thin", map[string]string{"/v1/subscriptions/sub_1": subscriptionJSON})
	f.Claim(t, "stripe", "evt_snap_5", "customer.subscription.updated",
		[]byte(`{"id":"evt_snap_5","object":"event","type":"customer.subscription.updated","created":1772359200,"data":{"object":`+subscriptionJSON+`}}`))
	f.WaitSettled(t, "stripe", "evt_snap_5")
	f.Claim(t, "stripe", "evt_thin_5", "v1.customer.subscription.updated",
		thinEvent("evt_thin_5", "v1.customer.subscription.updated", relatedSub+`,"snapshot_event":"evt_snap_5"`))
	f.WaitSettled(t, "stripe", "evt_thin_5")
	require.Empty(t, f.api.seen())
	require.Len(t, f.applied.all(), 1, "the snapshot only")
}

func TestThinEventWithoutAPIKeyFails(t *testing.T) {
	t.Parallel()
	f := setup(t, "", nil)
	f.Claim(t, "stripe", "evt_thin_6", "v1.customer.subscription.updated", thinEvent("evt_thin_6", "v1.customer.subscription.updated", relatedSub))
	dbtest.Eventually(t, func() bool { return f.Row(t, "stripe", "evt_thin_6").Status == "failed" })
	require.Contains(t, f.Row(t, "stripe", "evt_thin_6").LastError.String, "STRIPE_API_KEY")
	require.Empty(t, f.api.seen())
}

func TestThinEventOfAnUnhandledTypeSettles(t *testing.T) {
	t.Parallel()
	f := setup(t, "sk_test_thin", nil)
	body, err := os.ReadFile("../../../testdata/providers/stripe/thin/v1.billing.meter.error_report_triggered.json")
	require.NoError(t, err)
	f.Claim(t, "stripe", "evt_234", "v1.billing.meter.error_report_triggered", body)
	f.WaitSettled(t, "stripe", "evt_234")
	require.Empty(t, f.api.seen())
	require.True(t, strings.HasPrefix(f.Registry.LabelType("stripe", "v1.billing.meter.error_report_triggered"), "v1."))
}

// TestUpgradeFailsThinEventsWhoseFetchGaveUp: a thin event whose fetch job
// gave up before the upgrade was left settled with nothing applied; the
// upgrade makes it failed with the reason, and a waiting fetch job becomes
// the event's apply job, which applies it.
func TestUpgradeFailsThinEventsWhoseFetchGaveUp(t *testing.T) {
	t.Parallel()
	db := dbtest.Empty(t)
	open := func() *sql.DB { return stdlib.OpenDBFromPool(db.Pool) }
	require.NoError(t, migrations.UpTo(open(), 20261203192125))
	for _, r := range []struct{ id, state string }{{"evt_gave_up", "cancelled"}, {"evt_waiting", "retryable"}} {
		_, err := db.SQL.Exec(`INSERT INTO webhook_event (namespace, event_id, provider, source, event_type, payload, status, attempts, settled_at)
			VALUES ('stripe', $1, 'stripe', 'stripe', 'v1.customer.subscription.updated', $2, 'settled', 1, now())`,
			r.id, string(thinEvent(r.id, "v1.customer.subscription.updated", relatedSub)))
		require.NoError(t, err)
		_, err = db.SQL.Exec(`INSERT INTO river_job (kind, args, state, attempt, max_attempts, queue, priority, errors, finalized_at)
			VALUES ('stripe_thin_fetch', jsonb_build_object('namespace', 'stripe', 'event_id', $1::text), $2::river_job_state, 1, 20, 'default', 1,
				ARRAY['{"attempt":1,"at":"2026-12-01T00:00:00Z","error":"Stripe answered 401 Unauthorized"}'::jsonb],
				CASE WHEN $2::text = 'cancelled' THEN now() END)`, r.id, r.state)
		require.NoError(t, err)
	}
	require.NoError(t, migrations.Up(open()))

	var status, lastError string
	require.NoError(t, db.SQL.QueryRow(`SELECT status, last_error FROM webhook_event WHERE event_id = 'evt_gave_up'`).Scan(&status, &lastError))
	require.Equal(t, "failed", status)
	require.Contains(t, lastError, "401")
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM webhook_event WHERE event_id = 'evt_waiting' AND status = 'claimed'`))
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'apply_event' AND args = '{"namespace":"stripe","event_id":"evt_waiting"}'`))
}

// TestThinRelatedObjectOutsideTheAppliedResourcesIsRefused: a thin event
// whose related_object steps out of the object its type names (an encoded
// traversal, another resource, a type that disagrees with its path, or
// another id) fails for good with the reason, and Stripe's API is never
// asked for it.
func TestThinRelatedObjectOutsideTheAppliedResourcesIsRefused(t *testing.T) {
	t.Parallel()
	f := setup(t, "sk_test_thin", map[string]string{
		"/v1/subscriptions/sub_1": subscriptionJSON,
		"/v1/customers/cus_1":     `{"id":"cus_1","object":"customer","email":"a@example.com"}`,
		"/v1/charges/ch_1":        `{"id":"ch_1","object":"charge"}`,
	})
	for _, c := range []struct{ id, related, reason string }{
		{"evt_dotdot", `{"id":"sub_1","type":"subscription","url":"/v1/subscriptions/%2e%2e/customers/cus_1"}`, "not a plain API path"},
		{"evt_dotdot_upper", `{"id":"sub_1","type":"subscription","url":"/v1/subscriptions/sub_1/%2E%2E/%2E%2E/customers/cus_1"}`, "not a plain API path"},
		{"evt_slash", `{"id":"sub_1","type":"subscription","url":"/v1/subscriptions/sub_1%2F..%2Fcustomers"}`, "not a plain API path"},
		{"evt_query", `{"id":"sub_1","type":"subscription","url":"/v1/subscriptions/sub_1%3Fexpand=customer"}`, "not a plain API path"},
		{"evt_backslash", `{"id":"sub_1","type":"subscription","url":"/v1/subscriptions\\sub_1"}`, "not a plain API path"},
		{"evt_nul", `{"id":"sub_1","type":"subscription","url":"/v1/subscriptions/sub_1%00"}`, "not a plain API path"},
		{"evt_bad_escape", `{"id":"sub_1","type":"subscription","url":"/v1/subscriptions/sub_%zz"}`, "does not decode"},
		{"evt_encoded", `{"id":"sub_1","type":"subscription","url":"/v1/subscriptions/sub%5F1"}`, "is not /v1/subscriptions/sub_1"},
		{"evt_customer", `{"id":"cus_1","type":"customer","url":"/v1/customers/cus_1"}`, `related_object.type "customer"`},
		{"evt_other_path", `{"id":"sub_1","type":"subscription","url":"/v1/customers/cus_1"}`, "is not /v1/subscriptions/sub_1"},
		{"evt_any_v1", `{"id":"sub_1","type":"subscription","url":"/v1/subscriptions/sub_1/items"}`, "is not /v1/subscriptions/sub_1"},
		{"evt_type_mismatch", `{"id":"ch_1","type":"subscription","url":"/v1/charges/ch_1"}`, "is not /v1/subscriptions/ch_1"},
		{"evt_type_lies", `{"id":"ch_1","type":"charge","url":"/v1/charges/ch_1"}`, `related_object.type "charge", but the event is of a subscription`},
		{"evt_bad_id", `{"id":"sub_1/../x","type":"subscription","url":"/v1/subscriptions/sub_1/../x"}`, "not a Stripe object id"},
	} {
		f.Claim(t, "stripe", c.id, "v1.customer.subscription.updated",
			thinEvent(c.id, "v1.customer.subscription.updated", `"related_object":`+c.related))
		state, attempt := f.jobState(t, c.id)
		require.Equal(t, "cancelled", state, c.id)
		require.Equal(t, 1, attempt, "%s: no retry changes it", c.id)
		row := f.Row(t, "stripe", c.id)
		require.Equal(t, "failed", row.Status, c.id)
		require.Contains(t, row.LastError.String, c.reason, c.id)
		require.Contains(t, row.LastError.String, "related object refused", c.id)
	}
	require.Empty(t, f.api.seen(), "no refused URL reaches Stripe's API")
	require.Empty(t, f.applied.all())
}

// TestThinRelatedObjectNamedByTheFetchedEventIsChecked: without a
// related_object in the delivery, the one GET /v2/core/events/{id} names is
// held to the same rule, and the object behind it is not fetched.
func TestThinRelatedObjectNamedByTheFetchedEventIsChecked(t *testing.T) {
	t.Parallel()
	f := setup(t, "sk_test_thin", map[string]string{
		"/v2/core/events/evt_thin_9": string(thinEvent("evt_thin_9", "v1.customer.subscription.updated",
			`"related_object":{"id":"cus_1","type":"customer","url":"/v1/customers/cus_1"}`)),
		"/v1/customers/cus_1": `{"id":"cus_1","object":"customer"}`,
	})
	f.Claim(t, "stripe", "evt_thin_9", "v1.customer.subscription.updated", thinEvent("evt_thin_9", "v1.customer.subscription.updated", `"context":null`))
	state, _ := f.jobState(t, "evt_thin_9")
	require.Equal(t, "cancelled", state)
	require.Contains(t, f.Row(t, "stripe", "evt_thin_9").LastError.String, `related_object.type "customer"`)
	paths := []string{}
	for _, r := range f.api.seen() {
		paths = append(paths, r.path)
	}
	require.Equal(t, []string{"/v2/core/events/evt_thin_9"}, paths)
	require.Empty(t, f.applied.all())
}

// TestThinFetchedObjectOfAnotherKindIsRefused: the API's answer must be
// the object the event names: its "object" the resource's and its id the
// related object's, else the thin event fails for good and no handler runs.
func TestThinFetchedObjectOfAnotherKindIsRefused(t *testing.T) {
	t.Parallel()
	f := setup(t, "sk_test_thin", map[string]string{
		"/v1/subscriptions/sub_1": `{"id":"sub_1","object":"customer","email":"a@example.com"}`,
		"/v1/subscriptions/sub_2": `{"id":"sub_9","object":"subscription","status":"canceled"}`,
		"/v1/subscriptions/sub_3": `{"id":"sub_3","status":"active"}`,
		"/v1/subscriptions/sub_4": `["sub_4"]`,
	})
	for _, c := range []struct{ id, sub, reason string }{
		{"evt_wrong_object", "sub_1", `answered object "customer" id "sub_1", want object "subscription" id "sub_1"`},
		{"evt_wrong_id", "sub_2", `answered object "subscription" id "sub_9", want object "subscription" id "sub_2"`},
		{"evt_no_object", "sub_3", `answered object "" id "sub_3"`},
		{"evt_not_object", "sub_4", "did not answer a JSON object"},
	} {
		f.Claim(t, "stripe", c.id, "v1.customer.subscription.updated", thinEvent(c.id, "v1.customer.subscription.updated",
			`"related_object":{"id":"`+c.sub+`","type":"subscription","url":"/v1/subscriptions/`+c.sub+`"}`))
		state, attempt := f.jobState(t, c.id)
		require.Equal(t, "cancelled", state, c.id)
		require.Equal(t, 1, attempt, c.id)
		row := f.Row(t, "stripe", c.id)
		require.Equal(t, "failed", row.Status, c.id)
		require.Contains(t, row.LastError.String, c.reason, c.id)
	}
	require.Empty(t, f.applied.all(), "no handler sees another object")
	require.Len(t, f.api.seen(), 4, "each object fetched once: the refusal is not retried")
}
