package invoice

import (
	"context"
	"fmt"
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

// Register adds the module's handlers and its table, whose erase it
// registers too.
func Register(reg *ledger.Registry) {
	m := &module{rows: ledger.NewLatest(reg, ledger.LatestOf[key, state]{
		Table: "invoice",
		// The later event, then, within a second, the further status (a
		// draft is finalized, an open invoice paid, voided or marked
		// uncollectible, an uncollectible one still paid or voided), the
		// greater amounts, and the rest as text; the customer, a subject
		// erase can redact, last.
		Precedence: []ledger.Order{
			ledger.By("version"), ledger.ByRank("status", statusRank), ledger.By("amount_paid"), ledger.By("amount_due"),
			ledger.By("status"), ledger.By("currency"), ledger.By("event_id"), ledger.By("customer_id"),
		},
	})}
	for _, t := range Types {
		ledger.On(reg, "stripe", t, m.apply)
	}
}

// module is the module's table of invoices.
type module struct {
	rows *ledger.Latest[key, state]
}

// key is an invoice row's unique key.
type key struct {
	Namespace  string `col:"namespace"`
	Provider   string `col:"provider"`
	ExternalID string `col:"external_id"`
}

// state is what an event says of its invoice: the rest of its row.
type state struct {
	CustomerID string `col:"customer_id,subject"`
	Status     string `col:"status"`
	AmountDue  int64  `col:"amount_due"`
	AmountPaid int64  `col:"amount_paid"`
	Currency   string `col:"currency"`
	Version    int64  `col:"version"` // the event's created, Unix seconds
	EventID    string `col:"event_id"`
}

// event is the fields the module reads, by exact path.
type event struct {
	Created    int64                 `field:"created,required"`
	ID         string                `field:"data.object.id,required"`
	Customer   provider.ExpandableID `field:"data.object.customer"`
	Status     string                `field:"data.object.status"`
	AmountDue  int64                 `field:"data.object.amount_due"`
	AmountPaid int64                 `field:"data.object.amount_paid"`
	Currency   string                `field:"data.object.currency"`
}

// apply stages what an invoice event says of its invoice.
func (m *module) apply(_ context.Context, tx *ledger.Tx, ev *ledger.Event, e event) error {
	if !strings.HasPrefix(e.ID, "in_") {
		return ledger.Permanent(fmt.Errorf("%s: data.object.id %q is not an invoice's (in_...)", ev.Type, e.ID))
	}
	m.rows.Put(tx, key{ev.Namespace, ev.Provider, e.ID}, state{
		CustomerID: string(e.Customer), Status: e.Status, AmountDue: e.AmountDue, AmountPaid: e.AmountPaid,
		Currency: e.Currency, Version: e.Created, EventID: ev.EventID,
	})
	return nil
}

// statusRank orders the statuses of one invoice within a second. Statuses
// Stripe adds later rank first, as a draft.
var statusRank = map[string]int{"draft": 0, "open": 1, "uncollectible": 2, "paid": 3, "void": 3}
