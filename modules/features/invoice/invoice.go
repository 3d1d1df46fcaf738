package invoice

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// Types are the Stripe event types applied, each carrying the whole
// invoice as data.object. They are listed rather than matched as
// invoice.*: invoice.upcoming has no id and invoice.deleted removes a
// draft, and a type Stripe adds later shows up as unhandled instead of
// being applied unseen.
var Types = []string{
	"invoice.created", "invoice.updated", "invoice.finalized", "invoice.finalization_failed",
	"invoice.paid", "invoice.payment_succeeded", "invoice.payment_failed", "invoice.payment_action_required",
	"invoice.marked_uncollectible", "invoice.voided",
}

// Register adds the module's handlers, its staged write and its erase
// hook.
func Register(reg *ledger.Registry) {
	m := &module{rows: ledger.NewWrite(reg, ledger.WriteFuncs[key, state]{Merge: newer, Flush: flush})}
	for _, t := range Types {
		reg.Handle("stripe", t, m.apply)
	}
	reg.Erase(erase)
}

// module is the module's staged write of its rows.
type module struct {
	rows *ledger.Write[key, state]
}

// key is an invoice row's unique key.
type key struct{ Namespace, Provider, ExternalID string }

// state is what an event says of its invoice.
type state struct {
	CustomerID            string
	Status                string
	AmountDue, AmountPaid int64
	Currency              string
	Version               int64 // the event's created, Unix seconds
	EventID               string
}

// event is the fields the module reads, by exact path.
type event struct {
	Created    int64                 `field:"created"`
	ID         string                `field:"data.object.id"`
	Customer   provider.ExpandableID `field:"data.object.customer"`
	Status     string                `field:"data.object.status"`
	AmountDue  int64                 `field:"data.object.amount_due"`
	AmountPaid int64                 `field:"data.object.amount_paid"`
	Currency   string                `field:"data.object.currency"`
}

var fields = provider.FieldsOf[event]()

// apply stages what an invoice event says of its invoice. A payload no
// retry can fix fails for good (ledger.Permanent).
func (m *module) apply(_ context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	e, err := fields.Read(ev.Payload)
	if err != nil {
		return ledger.Permanent(fmt.Errorf("decode %s: %w", ev.Type, err))
	}
	if !strings.HasPrefix(e.ID, "in_") {
		return ledger.Permanent(fmt.Errorf("%s: data.object.id %q is not an invoice's (in_...)", ev.Type, e.ID))
	}
	m.rows.Put(tx, key{ev.Namespace, ev.Provider, e.ID}, state{
		CustomerID: string(e.Customer), Status: e.Status, AmountDue: e.AmountDue, AmountPaid: e.AmountPaid,
		Currency: e.Currency, Version: e.Created, EventID: ev.EventID,
	})
	return nil
}

// statusRank orders the statuses of one invoice within a second: a draft
// is finalized (open), an open invoice is paid, voided or marked
// uncollectible, and an uncollectible one can still be paid or voided.
// Statuses Stripe adds later rank first, as a draft.
var statusRank = map[string]int{"draft": 0, "open": 1, "uncollectible": 2, "paid": 3, "void": 3}

// precedence is the order of two states of one invoice: the later
// version, then the greater rank of its status, amount paid, amount due,
// status, customer, currency and event id. newer (the merge) and flush's
// guard (precedenceSQL) both compare this tuple, so that folding a
// batch's events first and writing once gives the row that writing each
// event in turn would.
func precedence(s state) []any {
	return []any{s.Version, int64(statusRank[s.Status]), s.AmountPaid, s.AmountDue, s.Status, s.CustomerID, s.Currency, s.EventID}
}

// precedenceSQL is precedence of the row alias r, as an SQL row.
func precedenceSQL(r string) string {
	ranks := make([]string, 0, len(statusRank))
	for status, rank := range statusRank {
		ranks = append(ranks, "WHEN '"+status+"' THEN "+strconv.Itoa(rank))
	}
	sort.Strings(ranks)
	c := func(col string) string { return r + "." + col + ` COLLATE "C"` }
	return "(" + r + ".version, CASE " + r + ".status " + strings.Join(ranks, " ") + " ELSE 0 END, " +
		r + ".amount_paid, " + r + ".amount_due, " + c("status") + ", " + c("customer_id") + ", " + c("currency") + ", " + c("event_id") + ")"
}

// newer is the merge rule: of two events of one invoice in an apply, the
// one of greater precedence.
func newer(older, newer state) state {
	if less(precedence(older), precedence(newer)) {
		return newer
	}
	return older
}

// less compares two precedence tuples of the same shape, strings
// byte by byte as COLLATE "C" does.
func less(a, b []any) bool {
	for i := range a {
		switch x := a[i].(type) {
		case int64:
			if y := b[i].(int64); x != y {
				return x < y
			}
		case string:
			if y := b[i].(string); x != y {
				return x < y
			}
		}
	}
	return false
}

// flush writes an apply's invoices in one statement, keys sorted by the
// core; an event of lower precedence than the stored row leaves it alone.
// A customer erased in the namespace is written redacted.
func flush(ctx context.Context, tx *ledger.Tx, entries []ledger.Entry[key, state]) error {
	n := len(entries)
	var (
		namespaces, providers, ids, customers = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		statuses, currencies, events          = make([]string, n), make([]string, n), make([]string, n)
		due, paid, versions                   = make([]int64, n), make([]int64, n), make([]int64, n)
	)
	for i, e := range entries {
		k, s := e.Key, e.Value
		namespaces[i], providers[i], ids[i], customers[i] = k.Namespace, k.Provider, k.ExternalID, s.CustomerID
		statuses[i], currencies[i], events[i] = s.Status, s.Currency, s.EventID
		due[i], paid[i], versions[i] = s.AmountDue, s.AmountPaid, s.Version
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO invoice AS r (namespace, provider, external_id, customer_id, status, amount_due, amount_paid, currency, version, event_id)
		SELECT k.namespace, k.provider, k.external_id, `+ledger.RedactErasedSQL("k.namespace", "k.customer_id")+`,
			k.status, k.amount_due, k.amount_paid, k.currency, k.version, k.event_id
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::text[], $9::bigint[], $10::text[])
			AS k(namespace, provider, external_id, customer_id, status, amount_due, amount_paid, currency, version, event_id)
		ON CONFLICT (namespace, provider, external_id) DO UPDATE
		SET customer_id = EXCLUDED.customer_id, status = EXCLUDED.status, amount_due = EXCLUDED.amount_due,
			amount_paid = EXCLUDED.amount_paid, currency = EXCLUDED.currency, version = EXCLUDED.version,
			event_id = EXCLUDED.event_id, updated_at = CURRENT_TIMESTAMP
		WHERE `+precedenceSQL("r")+` < `+precedenceSQL("EXCLUDED"),
		namespaces, providers, ids, customers, statuses, due, paid, currencies, versions, events)
	if err != nil {
		return fmt.Errorf("write %d invoice(s): %w", n, err)
	}
	return nil
}

// erase redacts the customer of every invoice of customer in namespace
// (all when empty): customer_id becomes ledger.Erased, the rest stays.
// The row is kept, not deleted, so that an older event delivered later
// for the first time cannot create it again; a newer one writes the
// customer redacted (flush). Rows are locked in key order, the order an
// apply's write locks them in.
func erase(ctx context.Context, tx *ledger.Tx, customer, namespace string, _ bool) (int64, error) {
	return ledger.RedactRows(ctx, tx, "invoice", "customer_id", "namespace, provider, external_id", customer, namespace)
}
