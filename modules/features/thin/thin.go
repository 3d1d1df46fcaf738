package thin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// Config holds the module's dependencies.
type Config struct {
	// API is Stripe's, where the apply reads the related object.
	API provider.StripeAPI
}

// Register adds the handler of Stripe's v1 thin events. Register it after
// the modules whose snapshot types it relays; it looks their handlers up
// when an event is applied.
func Register(reg *ledger.Registry, cfg Config) {
	m := &module{cfg: cfg, reg: reg}
	reg.Prepare("stripe", "v1.*", m.prepare)
	reg.Handle("stripe", "v1.*", m.apply)
}

type module struct {
	cfg Config
	reg *ledger.Registry
}

// event is the part of a thin event used, in a delivery (Fields) and as
// GET /v2/core/events/{id} answers it (encoding/json).
type event struct {
	ID            string    `field:"id" json:"id"`
	Object        string    `field:"object" json:"object"`
	Type          string    `field:"type" json:"type"`
	Created       time.Time `field:"created" json:"created"`
	Context       string    `field:"context" json:"context"`
	SnapshotEvent string    `field:"snapshot_event" json:"snapshot_event"`
	RelatedObject related   `json:"related_object"`
}

// related is a thin event's related_object.
type related struct {
	ID   string `field:"related_object.id" json:"id"`
	Type string `field:"related_object.type" json:"type"`
	URL  string `field:"related_object.url" json:"url"`
}

var eventFields = provider.FieldsOf[event]()

// snapshotType is the classic type of a v1 thin event's type.
func snapshotType(thinType string) string { return strings.TrimPrefix(thinType, "v1.") }

func decode(payload []byte) (event, error) {
	te, err := eventFields.Read(payload)
	if err != nil {
		return event{}, ledger.Permanent(fmt.Errorf("decode thin event: %w", err))
	}
	if te.Object != "v2.core.event" || te.Created.IsZero() {
		return event{}, ledger.Permanent(errors.New(`not a thin event: want "object": "v2.core.event" and an RFC 3339 created`))
	}
	return te, nil
}

// prepare fetches the object a thin event names, before the event's apply
// transaction and outside any ledger lock (ledger.Registry.Prepare), and
// returns ctx carrying the snapshot event it makes for apply. Its
// failure is the event's.
func (m *module) prepare(ctx context.Context, client *ent.Client, ev *ledger.Event) (context.Context, error) {
	sev, err := m.fetch(ctx, client, ev)
	if err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, fetchedKey{}, fetched{key: keyOf(ev), snapshot: sev}), nil
}

// fetchedKey is the context key of what prepare fetched.
type fetchedKey struct{}

// fetched is a thin event's fetch: the snapshot event its object makes,
// nil when there is nothing to apply (its twin is in the ledger).
type fetched struct {
	key      ledger.EventKey
	snapshot *ledger.Event
}

func keyOf(ev *ledger.Event) ledger.EventKey {
	return ledger.EventKey{Namespace: ev.Namespace, EventID: ev.EventID}
}

// apply runs the snapshot type's handlers on the snapshot event a thin
// event's object makes, in the apply transaction: the object prepare
// fetched, or, for an event applied without it (ledger.Apply called
// directly), the object fetched here. A twin that reached the ledger
// since the fetch leaves the change to it.
func (m *module) apply(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	handlers := m.reg.Handlers("stripe", snapshotType(ev.Type))
	if len(handlers) == 0 {
		return nil
	}
	f, ok := ctx.Value(fetchedKey{}).(fetched)
	if !ok || f.key != keyOf(ev) {
		sev, err := m.fetch(ctx, tx.Ent, ev)
		if err != nil {
			return err
		}
		f = fetched{key: keyOf(ev), snapshot: sev}
	} else if f.snapshot != nil {
		te, err := decode(ev.Payload)
		if err != nil {
			return err
		}
		if twin, err := twinInLedger(ctx, tx.Ent, ev.Namespace, te.SnapshotEvent); err != nil || twin {
			return err
		}
	}
	if f.snapshot == nil {
		return nil
	}
	// The snapshot type's handlers insert their jobs (a payment's receipt)
	// in this transaction.
	for _, h := range handlers {
		if err := h(ctx, tx, f.snapshot); err != nil {
			return err
		}
	}
	return nil
}

// fetch reads the object a thin event names from Stripe's API and returns
// the snapshot event it makes; nil when the event's snapshot twin is in
// the ledger (that event applies the change) or no module handles its
// snapshot type. Stripe unreachable or failing (the network, 429, 5xx),
// a refused key (401, 403: it can be fixed) or no key at all are failures
// River retries; an object Stripe does not have (404), or one hookledger
// refuses to fetch, fails the event for good.
func (m *module) fetch(ctx context.Context, client *ent.Client, ev *ledger.Event) (*ledger.Event, error) {
	snap := snapshotType(ev.Type)
	if len(m.reg.Handlers("stripe", snap)) == 0 {
		return nil, nil
	}
	te, err := decode(ev.Payload)
	if err != nil {
		return nil, err
	}
	res, ok := resourceOf(snap)
	if !ok {
		return nil, ledger.Permanent(fmt.Errorf("%s: hookledger fetches no related object for %s events", te.ID, snap))
	}
	if te.RelatedObject.URL != "" {
		if _, err := res.check(&te.RelatedObject); err != nil {
			return nil, ledger.Permanent(fmt.Errorf("%s: %w", te.ID, err))
		}
	}
	if twin, err := twinInLedger(ctx, client, ev.Namespace, te.SnapshotEvent); err != nil || twin {
		return nil, err
	}
	if m.cfg.API.Key == "" {
		return nil, fmt.Errorf("%s is a thin event, which carries no state: set STRIPE_API_KEY so that its object can be fetched", ev.Type)
	}
	obj, err := object(ctx, m.cfg.API, te, res)
	var refused *provider.APIRefusal
	switch {
	case errors.Is(err, errRelated):
		return nil, ledger.Permanent(fmt.Errorf("%s: %w", te.ID, err))
	case errors.As(err, &refused) && (refused.Code == http.StatusUnauthorized || refused.Code == http.StatusForbidden):
		return nil, fmt.Errorf("fetch the object of %s: %w (check STRIPE_API_KEY)", te.ID, err)
	case errors.As(err, &refused):
		return nil, ledger.Permanent(fmt.Errorf("fetch the object of %s: %w", te.ID, err))
	case err != nil:
		return nil, fmt.Errorf("fetch the object of %s: %w", te.ID, err)
	}
	payload, err := snapshot(te, obj)
	if err != nil {
		return nil, ledger.Permanent(err)
	}
	return &ledger.Event{Namespace: ev.Namespace, EventID: te.ID, Provider: ev.Provider, Source: ev.Source,
		Type: snap, Payload: payload, OccurredAt: te.Created, Replayed: ev.Replayed, Forced: ev.Forced}, nil
}

// object returns the thin event's related object as the API serves it,
// reading the event from GET /v2/core/events/{id} first when the delivery
// names none. The related object must be one of res's (its type, its
// path and, once fetched, its object and id): anything else is refused
// with errRelated, before any request for it is made.
func object(ctx context.Context, api provider.StripeAPI, te event, res resource) (json.RawMessage, error) {
	rel := &te.RelatedObject
	if rel.URL == "" {
		var full event
		if err := api.Get(ctx, "/v2/core/events/"+url.PathEscape(te.ID), te.Context, &full); err != nil {
			return nil, err
		}
		if rel = &full.RelatedObject; rel.URL == "" {
			return nil, &provider.APIRefusal{Status: "an event without a related object"}
		}
	}
	path, err := res.check(rel)
	if err != nil {
		return nil, err
	}
	var obj json.RawMessage
	if err := api.Get(ctx, path, te.Context, &obj); err != nil {
		return nil, err
	}
	var got struct {
		Object string `json:"object"`
		ID     string `json:"id"`
	}
	if err := json.Unmarshal(obj, &got); err != nil {
		return nil, fmt.Errorf("%w: GET %s did not answer a JSON object: %v", errRelated, path, err)
	}
	if got.Object != res.object || got.ID != rel.ID {
		return nil, fmt.Errorf("%w: GET %s answered object %q id %q, want object %q id %q", errRelated, path, got.Object, got.ID, res.object, rel.ID)
	}
	return obj, nil
}

// errRelated marks a related object hookledger refuses to fetch or to
// apply: a permanent failure, as no retry changes it.
var errRelated = errors.New("related object refused")

// resource is a v1 API resource whose thin events hookledger applies.
type resource struct {
	// event is the prefix of its snapshot event types.
	event string
	// object is its "object" (and related_object.type) value.
	object string
	// collection is its path segment: /v1/{collection}/{id}.
	collection string
}

// resources are the objects of the snapshot types hookledger's modules
// handle (subscription, payment): the only ones a thin event may make it
// fetch. A module that handles another Stripe type adds its resource here.
var resources = []resource{
	{event: "customer.subscription.", object: "subscription", collection: "subscriptions"},
	{event: "payment_intent.", object: "payment_intent", collection: "payment_intents"},
	{event: "charge.", object: "charge", collection: "charges"},
	{event: "invoice.", object: "invoice", collection: "invoices"},
}

// resourceOf returns the resource a snapshot type is an event of: its
// prefix and one more segment (charge.refunded, not charge.dispute.created,
// whose object is a dispute).
func resourceOf(snapType string) (resource, bool) {
	for _, r := range resources {
		if action, ok := strings.CutPrefix(snapType, r.event); ok && action != "" && !strings.Contains(action, ".") {
			return r, true
		}
	}
	return resource{}, false
}

// objectID is the shape of a Stripe object id.
var objectID = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// check returns the path to fetch rel at: /v1/{collection}/{id}, exactly,
// with rel's id, and rel's type the resource's. The URL is checked as sent
// and percent-decoded, so an encoded dot, slash or query cannot reach
// another endpoint.
func (r resource) check(rel *related) (string, error) {
	if rel.Type != r.object {
		return "", fmt.Errorf("%w: related_object.type %q, but the event is of a %s", errRelated, rel.Type, r.object)
	}
	if !objectID.MatchString(rel.ID) {
		return "", fmt.Errorf("%w: related_object.id %q is not a Stripe object id", errRelated, rel.ID)
	}
	decoded, err := url.PathUnescape(rel.URL)
	if err != nil {
		return "", fmt.Errorf("%w: related_object.url %q does not decode: %v", errRelated, rel.URL, err)
	}
	for _, p := range []string{rel.URL, decoded} {
		if !plainPath(p) {
			return "", fmt.Errorf("%w: related_object.url %q is not a plain API path (no .., //, ?, #, backslash or unprintable characters)", errRelated, rel.URL)
		}
	}
	want := "/v1/" + r.collection + "/" + rel.ID
	if decoded != want || rel.URL != want {
		return "", fmt.Errorf("%w: related_object.url %q is not %s", errRelated, rel.URL, want)
	}
	return want, nil
}

// plainPath reports whether p holds only printable ASCII, and none of the
// sequences that step out of a path: .., //, ?, #, backslash.
func plainPath(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] >= 0x7f {
			return false
		}
	}
	return !strings.Contains(p, "..") && !strings.Contains(p, "//") && !strings.ContainsAny(p, "?#\\")
}

// twinInLedger reports whether the snapshot event id is in the namespace's
// ledger: that event applies the change.
func twinInLedger(ctx context.Context, client *ent.Client, namespace, snapshotID string) (bool, error) {
	if snapshotID == "" {
		return false, nil
	}
	ok, err := client.WebhookEvent.Query().Where(webhookevent.Namespace(namespace), webhookevent.EventID(snapshotID)).Exist(ctx)
	if err != nil {
		return false, fmt.Errorf("look up snapshot twin %s: %w", snapshotID, err)
	}
	return ok, nil
}

// snapshot is the classic event a thin event and its fetched object make:
// what the snapshot type's handlers read. created is in Unix seconds, as
// in a snapshot event, so both twins write one version.
func snapshot(te event, obj json.RawMessage) ([]byte, error) {
	var s struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Type    string `json:"type"`
		Created int64  `json:"created"`
		Account string `json:"account,omitempty"`
		Data    struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}
	s.ID, s.Object, s.Type, s.Created, s.Account = te.ID, "event", snapshotType(te.Type), te.Created.Unix(), te.Context
	s.Data.Object = obj
	return json.Marshal(s)
}
