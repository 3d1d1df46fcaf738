package entitlement

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// Type is the Stripe event type applied.
const Type = "entitlements.active_entitlement_summary.updated"

// Register adds the module's handler, its staged write and its erase hook.
func Register(reg *ledger.Registry) {
	m := &module{summaries: ledger.NewWrite(reg, ledger.WriteFuncs[key, summary]{Merge: newer, Flush: flush})}
	reg.Handle("stripe", Type, m.apply)
	reg.Erase(erase)
}

type module struct {
	summaries *ledger.Write[key, summary]
}

// key is a customer's summary: the entitlement_summary row's unique key,
// and the first three columns of the customer's entitlement rows' key.
type key struct{ Namespace, Provider, CustomerID string }

// summary is what an event says of a customer's active features.
type summary struct {
	Version  int64 // the event's created, Unix seconds
	EventID  string
	Features []feature // by lookup_key, each once
}

// feature is one active entitlement of a summary.
type feature struct{ LookupKey, FeatureID string }

// event is the fields the module reads, by exact path.
type event struct {
	Created      int64           `field:"created"`
	Customer     string          `field:"data.object.customer"`
	Entitlements json.RawMessage `field:"data.object.entitlements.data"`
}

var fields = provider.FieldsOf[event]()

// listed is an entitlements.active_entitlement of the summary's list; its
// feature is an id or, expanded, the feature object.
type listed struct {
	LookupKey string          `json:"lookup_key"`
	Feature   json.RawMessage `json:"feature"`
}

// apply stages the customer's set of active features the summary lists.
// A payload no retry can fix fails for good (ledger.Permanent).
func (m *module) apply(_ context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	e, err := fields.Read(ev.Payload)
	if err != nil {
		return ledger.Permanent(fmt.Errorf("decode %s: %w", ev.Type, err))
	}
	if e.Customer == "" {
		return ledger.Permanent(fmt.Errorf("%s without data.object.customer", ev.Type))
	}
	var list []listed
	if len(e.Entitlements) > 0 && string(e.Entitlements) != "null" {
		if err := json.Unmarshal(e.Entitlements, &list); err != nil {
			return ledger.Permanent(fmt.Errorf("%s data.object.entitlements.data: %w", ev.Type, err))
		}
	}
	s := summary{Version: e.Created, EventID: ev.EventID}
	for _, l := range list {
		if l.LookupKey == "" {
			return ledger.Permanent(fmt.Errorf("%s: an entitlement without lookup_key", ev.Type))
		}
		id, err := featureID(l.Feature)
		if err != nil {
			return ledger.Permanent(fmt.Errorf("%s: entitlement %s: %w", ev.Type, l.LookupKey, err))
		}
		s.Features = append(s.Features, feature{l.LookupKey, id})
	}
	slices.SortStableFunc(s.Features, func(a, b feature) int { return cmp.Compare(a.LookupKey, b.LookupKey) })
	s.Features = slices.CompactFunc(s.Features, func(a, b feature) bool { return a.LookupKey == b.LookupKey })
	m.summaries.Put(tx, key{ev.Namespace, ev.Provider, e.Customer}, s)
	return nil
}

// featureID reads a feature given as its id or as the expanded object.
func featureID(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var id string
	if err := json.Unmarshal(raw, &id); err == nil {
		return id, nil
	}
	var obj struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", errors.New("feature is neither an id nor an object")
	}
	return obj.ID, nil
}

// features is the summary's set as entitlement_summary.features keeps it:
// lookup_key=feature_id pairs, sorted, comma-separated.
func (s summary) features() string {
	pairs := make([]string, len(s.Features))
	for i, f := range s.Features {
		pairs[i] = f.LookupKey + "=" + f.FeatureID
	}
	return strings.Join(pairs, ",")
}

// newer is the merge rule, and flush's guard is the same comparison in
// SQL: of two summaries of one customer, the later version wins; of two
// of one second, the greater set (compared as text, byte by byte, as
// COLLATE "C" does), then the greater event id.
func newer(older, newer summary) summary {
	if cmp.Or(cmp.Compare(older.Version, newer.Version), strings.Compare(older.features(), newer.features()),
		strings.Compare(older.EventID, newer.EventID)) < 0 {
		return newer
	}
	return older
}

// flush writes an apply's summaries: the customers' summary rows, guarded
// by version, in one statement; then, for each customer whose summary
// moved, its entitlement rows are replaced by the summary's set, in one
// statement each. A customer erased in the namespace is not written.
func flush(ctx context.Context, tx *ledger.Tx, entries []ledger.Entry[key, summary]) error {
	n := len(entries)
	namespaces, providers, customers, sets, events := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	versions := make([]int64, n)
	for i, e := range entries {
		namespaces[i], providers[i], customers[i] = e.Key.Namespace, e.Key.Provider, e.Key.CustomerID
		sets[i], events[i], versions[i] = e.Value.features(), e.Value.EventID, e.Value.Version
	}
	rows, err := tx.QueryContext(ctx, `
		INSERT INTO entitlement_summary AS s (namespace, provider, customer_id, version, features, event_id)
		SELECT k.namespace, k.provider, k.customer_id, k.version, k.features, k.event_id
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[])
			AS k(namespace, provider, customer_id, version, features, event_id)
		WHERE NOT `+ledger.ErasedSQL("k.namespace", "k.customer_id")+`
		ON CONFLICT (namespace, provider, customer_id) DO UPDATE
		SET version = EXCLUDED.version, features = EXCLUDED.features, event_id = EXCLUDED.event_id, updated_at = CURRENT_TIMESTAMP
		WHERE (s.version, s.features COLLATE "C", s.event_id COLLATE "C")
			< (EXCLUDED.version, EXCLUDED.features COLLATE "C", EXCLUDED.event_id COLLATE "C")
		RETURNING s.namespace, s.provider, s.customer_id`,
		namespaces, providers, customers, versions, sets, events)
	if err != nil {
		return fmt.Errorf("write %d entitlement summaries: %w", n, err)
	}
	moved := map[key]bool{}
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.Namespace, &k.Provider, &k.CustomerID); err != nil {
			rows.Close()
			return fmt.Errorf("write %d entitlement summaries: %w", n, err)
		}
		moved[k] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("write %d entitlement summaries: %w", n, err)
	}
	if len(moved) == 0 {
		return nil
	}
	var (
		dNamespaces, dProviders, dCustomers                     []string
		fNamespaces, fProviders, fCustomers, fKeys, fFeatureIDs []string
		fVersions                                               []int64
	)
	for _, e := range entries { // in key order, the order the rows are locked in
		if !moved[e.Key] {
			continue
		}
		dNamespaces, dProviders, dCustomers = append(dNamespaces, e.Key.Namespace), append(dProviders, e.Key.Provider), append(dCustomers, e.Key.CustomerID)
		for _, f := range e.Value.Features {
			fNamespaces, fProviders, fCustomers = append(fNamespaces, e.Key.Namespace), append(fProviders, e.Key.Provider), append(fCustomers, e.Key.CustomerID)
			fKeys, fFeatureIDs, fVersions = append(fKeys, f.LookupKey), append(fFeatureIDs, f.FeatureID), append(fVersions, e.Value.Version)
		}
	}
	if _, err := tx.ExecContext(ctx, `
		DELETE FROM entitlement e USING unnest($1::text[], $2::text[], $3::text[]) AS k(namespace, provider, customer_id)
		WHERE e.namespace = k.namespace AND e.provider = k.provider AND e.customer_id = k.customer_id`,
		dNamespaces, dProviders, dCustomers); err != nil {
		return fmt.Errorf("replace %d customers' entitlements: %w", len(dCustomers), err)
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO entitlement (namespace, provider, customer_id, lookup_key, feature_id, version)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])`,
		fNamespaces, fProviders, fCustomers, fKeys, fFeatureIDs, fVersions); err != nil {
		return fmt.Errorf("replace %d customers' entitlements: %w", len(dCustomers), err)
	}
	return nil
}

// erase deletes the customer's summaries and entitlements in namespace
// (all when empty): both are keyed by the customer, so nothing of them can
// be kept redacted. A later event of the customer is not written (flush
// skips an erased customer). The summaries are locked first, in key
// order, as an apply's write locks them.
func erase(ctx context.Context, tx *ledger.Tx, customer, namespace string, _ bool) (int64, error) {
	var n int64
	for _, stmt := range []string{`
		WITH hit AS (
			SELECT id FROM entitlement_summary WHERE customer_id = $1 AND ($2 = '' OR namespace = $2)
			ORDER BY namespace, provider, customer_id FOR UPDATE)
		DELETE FROM entitlement_summary s USING hit WHERE s.id = hit.id`, `
		DELETE FROM entitlement WHERE customer_id = $1 AND ($2 = '' OR namespace = $2)`,
	} {
		res, err := tx.ExecContext(ctx, stmt, customer, namespace)
		if err != nil {
			return 0, fmt.Errorf("erase entitlements: %w", err)
		}
		rows, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("erase entitlements: %w", err)
		}
		n += rows
	}
	return n, nil
}
