package entitlement

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// Type is the Stripe event type applied.
const Type = "entitlements.active_entitlement_summary.updated"

// Register adds the module's handler and its tables, whose erase it
// registers too.
func Register(reg *ledger.Registry) {
	m := &module{summaries: ledger.NewLatest(reg, ledger.LatestOf[key, summary]{
		Table: "entitlement_summary",
		// The later summary; of two of one second, the greater set
		// (compared as text), then the greater event id.
		Precedence: []ledger.Order{ledger.By("version"), ledger.By("features"), ledger.By("event_id")},
		Moved:      replaceFeatures,
	})}
	ledger.On(reg, "stripe", Type, m.apply)
	reg.Erase(erase)
}

type module struct {
	summaries *ledger.Latest[key, summary]
}

// key is a customer's summary: the entitlement_summary row's unique key,
// and the first three columns of the customer's entitlement rows' key.
type key struct {
	Namespace  string `col:"namespace"`
	Provider   string `col:"provider"`
	CustomerID string `col:"customer_id,subject"`
}

// summary is what an event says of a customer's active features.
type summary struct {
	Version int64  `col:"version"` // the event's created, Unix seconds
	EventID string `col:"event_id"`
	// Features is the set as the column keeps it: lookup_key=feature_id
	// pairs, sorted, comma-separated.
	Features string `col:"features"`
	// Active are the features, by lookup_key, each once.
	Active []feature
}

// feature is one active entitlement of a summary: an entitlement row.
type feature struct {
	Namespace  string `col:"namespace"`
	Provider   string `col:"provider"`
	CustomerID string `col:"customer_id"`
	LookupKey  string `col:"lookup_key"`
	FeatureID  string `col:"feature_id"`
	Version    int64  `col:"version"`
}

// event is the fields the module reads, by exact path; a feature is an id
// or, expanded, the feature object.
type event struct {
	Created      int64  `field:"created,required"`
	Customer     string `field:"data.object.customer,required"`
	Entitlements []struct {
		LookupKey string                `field:"lookup_key,required"`
		Feature   provider.ExpandableID `field:"feature"`
	} `field:"data.object.entitlements.data"`
}

// apply stages the customer's set of active features the summary lists.
func (m *module) apply(_ context.Context, tx *ledger.Tx, ev *ledger.Event, e event) error {
	s := summary{Version: e.Created, EventID: ev.EventID}
	for _, l := range e.Entitlements {
		s.Active = append(s.Active, feature{ev.Namespace, ev.Provider, e.Customer, l.LookupKey, string(l.Feature), e.Created})
	}
	slices.SortStableFunc(s.Active, func(a, b feature) int { return cmp.Compare(a.LookupKey, b.LookupKey) })
	s.Active = slices.CompactFunc(s.Active, func(a, b feature) bool { return a.LookupKey == b.LookupKey })
	pairs := make([]string, len(s.Active))
	for i, f := range s.Active {
		pairs[i] = f.LookupKey + "=" + f.FeatureID
	}
	s.Features = strings.Join(pairs, ",")
	m.summaries.Put(tx, key{ev.Namespace, ev.Provider, e.Customer}, s)
	return nil
}

// replaceFeatures replaces the entitlement rows of each customer whose
// summary moved with the summary's set: one statement deletes them all,
// one inserts the new sets.
func replaceFeatures(ctx context.Context, tx *ledger.Tx, moved []ledger.Entry[key, summary]) error {
	var (
		customers []key
		active    []feature
	)
	for _, e := range moved { // in key order, the order the rows are locked in
		customers = append(customers, e.Key)
		active = append(active, e.Value.Active...)
	}
	from, args := ledger.Unnest(customers, 1)
	if _, err := tx.ExecContext(ctx, `
		DELETE FROM entitlement e USING `+from+`
		WHERE e.namespace = k.namespace AND e.provider = k.provider AND e.customer_id = k.customer_id`, args...); err != nil {
		return fmt.Errorf("replace %d customers' entitlements: %w", len(customers), err)
	}
	from, args = ledger.Unnest(active, 1)
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO entitlement (namespace, provider, customer_id, lookup_key, feature_id, version)
		SELECT k.namespace, k.provider, k.customer_id, k.lookup_key, k.feature_id, k.version FROM `+from, args...); err != nil {
		return fmt.Errorf("replace %d customers' entitlements: %w", len(customers), err)
	}
	return nil
}

// erase deletes the customer's entitlements in namespace (all when
// empty); its summaries, keyed by the customer, are deleted by the
// summary table's own erase (ledger.NewLatest), first, in key order, as
// an apply's write locks them. A later event of the customer is not
// written: the summary's upsert skips an erased customer.
func erase(ctx context.Context, tx *ledger.Tx, customer, namespace string, _ bool) (int64, error) {
	res, err := tx.ExecContext(ctx, `DELETE FROM entitlement WHERE customer_id = $1 AND ($2 = '' OR namespace = $2)`, customer, namespace)
	if err != nil {
		return 0, fmt.Errorf("erase entitlements: %w", err)
	}
	return res.RowsAffected()
}
