package thin

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/hookledger/hookledger/ent"
	"github.com/hookledger/hookledger/ent/webhookevent"
	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// Config holds the module's dependencies.
type Config struct {
	// DB is where the fetch job reads the thin event and writes what its
	// object says.
	DB *sql.DB
	// API is Stripe's, where the fetch job reads the related object.
	API provider.StripeAPI
}

// Register adds the handler of Stripe's v1 thin events and the fetch
// worker. Register it after the modules whose snapshot types it relays;
// it looks their handlers up when an event is applied.
func Register(reg *ledger.Registry, cfg Config) {
	m := &module{cfg: cfg, reg: reg, ent: ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, cfg.DB)))}
	reg.Handle("stripe", "v1.*", m.apply)
	ledger.AddWorker(reg, &fetchWorker{m: m})
}

type module struct {
	cfg Config
	reg *ledger.Registry
	ent *ent.Client
}

// event is the part of a thin event used.
type event struct {
	ID            string    `json:"id"`
	Object        string    `json:"object"`
	Type          string    `json:"type"`
	Created       time.Time `json:"created"`
	Context       string    `json:"context"`
	SnapshotEvent string    `json:"snapshot_event"`
	RelatedObject *related  `json:"related_object"`
}

// related is a thin event's related_object.
type related struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	URL  string `json:"url"`
}

// snapshotType is the classic type of a v1 thin event's type.
func snapshotType(thinType string) string { return strings.TrimPrefix(thinType, "v1.") }

func decode(payload []byte) (event, error) {
	var te event
	if err := json.Unmarshal(payload, &te); err != nil {
		return event{}, ledger.Permanent(fmt.Errorf("decode thin event: %w", err))
	}
	if te.Object != "v2.core.event" || te.Created.IsZero() {
		return event{}, ledger.Permanent(errors.New(`not a thin event: want "object": "v2.core.event" and an RFC 3339 created`))
	}
	return te, nil
}

// apply links the event to its snapshot twin or schedules the fetch of its
// object, in the apply transaction. Types whose snapshot no module handles
// settle with no effect, as any unhandled type.
func (m *module) apply(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	snap := snapshotType(ev.Type)
	if len(m.reg.Handlers("stripe", snap)) == 0 {
		return nil
	}
	te, err := decode(ev.Payload)
	if err != nil {
		return err
	}
	if m.cfg.API.Key == "" {
		return ledger.Permanent(fmt.Errorf("%s is a thin event, which carries no state: set STRIPE_API_KEY so it can be fetched, then requeue it", ev.Type))
	}
	if twin, err := twinInLedger(ctx, tx.Ent, ev.Namespace, te.SnapshotEvent); err != nil || twin {
		return err
	}
	return tx.InsertJob(ctx, FetchArgs{Namespace: ev.Namespace, EventID: ev.EventID}, nil)
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
