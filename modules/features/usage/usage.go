package usage

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// Register adds the module's handler.
func Register(reg *ledger.Registry) {
	reg.Handle("standard", "usage.recorded", apply)
}

// Recorded is the data of a usage.recorded event.
type Recorded struct {
	CustomerID string `json:"customer_id"`
	Metric     string `json:"metric"`
	Quantity   int64  `json:"quantity"`
}

func apply(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	// Exact keys, as payload::jsonb->'data'->>'quantity' reads them.
	var r Recorded
	err := provider.DecodeFields(ev.Payload, provider.Field{Name: "data", Fields: []provider.Field{
		{Name: "customer_id", Dst: &r.CustomerID}, {Name: "metric", Dst: &r.Metric}, {Name: "quantity", Dst: &r.Quantity}}})
	if err != nil {
		return ledger.Permanent(fmt.Errorf("decode usage.recorded: %w", err))
	}
	if r.CustomerID == "" || r.Metric == "" {
		return ledger.Permanent(fmt.Errorf("usage.recorded without customer_id or metric"))
	}
	return record(ctx, tx, ev, r)
}

// record makes r the event's effect on its total. The delta each event
// added is kept in usage_delta, so that applying an event again (a forced
// requeue after a handler fix, or a duplicate under CLAIM_MODE=log-only)
// replaces its earlier delta instead of adding another: the total moves by
// the difference, and by nothing when the event reads the same. The ledger
// row's lock, held by the apply, serializes applies of one event. The
// writes are staged and made when the apply ends (totals).
func record(ctx context.Context, tx *ledger.Tx, ev *ledger.Event, r Recorded) error {
	w := ledger.Stage(tx, totalsKey{}, func() *totals {
		return &totals{deltas: map[eventKey]Recorded{}, moves: map[totalKey]*move{}}
	})
	ek := eventKey{ev.Namespace, ev.EventID}
	prev, ok := w.deltas[ek]
	if !ok {
		err := tx.QueryRowContext(ctx, `SELECT customer_id, metric, quantity FROM usage_delta WHERE namespace = $1 AND event_id = $2`,
			ev.Namespace, ev.EventID).Scan(&prev.CustomerID, &prev.Metric, &prev.Quantity)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			prev = Recorded{}
		case err != nil:
			return fmt.Errorf("read usage delta of %s: %w", ev.EventID, err)
		}
	}
	if prev.CustomerID != "" && (prev.CustomerID != r.CustomerID || prev.Metric != r.Metric) {
		// The fixed handler reads another total: take the delta off the old one.
		w.add(totalKey{ev.Namespace, prev.CustomerID, prev.Metric}, -prev.Quantity, false)
		prev = Recorded{}
	}
	w.add(totalKey{ev.Namespace, r.CustomerID, r.Metric}, r.Quantity-prev.Quantity, true)
	w.deltas[ek] = r
	return nil
}

// totalsKey stages the module's writes in an apply transaction.
type totalsKey struct{}

type (
	eventKey struct{ namespace, eventID string }
	totalKey struct{ namespace, customerID, metric string }
)

// move is what an apply adds to one total; create makes the total when it
// has no row yet (an event's own delta does; taking an old delta off a
// total only updates it, as that total was made with the delta).
type move struct {
	by     int64
	create bool
}

// totals are an apply transaction's usage writes: each event's delta, and
// what the transaction adds to each total, the sum of its events' moves.
// They are written when it ends (ledger.Staged), the totals in key order,
// whatever the order of the events: two applies that share totals then
// take the totals' row locks in one order and cannot deadlock, as they did
// when each event wrote its total as the apply reached it. A sum does not
// depend on the order of its terms, so the totals are those of writing
// each event alone, in order.
type totals struct {
	deltas map[eventKey]Recorded
	moves  map[totalKey]*move
}

func (w *totals) add(k totalKey, by int64, create bool) {
	m := w.moves[k]
	if m == nil {
		m = &move{}
		w.moves[k] = m
	}
	m.by += by
	m.create = m.create || create
}

// Flush writes the events' deltas and moves the totals, in key order.
func (w *totals) Flush(ctx context.Context, tx *ledger.Tx) error {
	events := slices.SortedFunc(maps.Keys(w.deltas), func(a, b eventKey) int {
		return cmp.Or(strings.Compare(a.namespace, b.namespace), strings.Compare(a.eventID, b.eventID))
	})
	for _, k := range events {
		d := w.deltas[k]
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO usage_delta (namespace, event_id, customer_id, metric, quantity) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (namespace, event_id) DO UPDATE
			SET customer_id = EXCLUDED.customer_id, metric = EXCLUDED.metric, quantity = EXCLUDED.quantity, applied_at = CURRENT_TIMESTAMP`,
			k.namespace, k.eventID, d.CustomerID, d.Metric, d.Quantity); err != nil {
			return fmt.Errorf("record usage delta of %s: %w", k.eventID, err)
		}
	}
	keys := slices.SortedFunc(maps.Keys(w.moves), func(a, b totalKey) int {
		return cmp.Or(strings.Compare(a.namespace, b.namespace), strings.Compare(a.customerID, b.customerID),
			strings.Compare(a.metric, b.metric))
	})
	for _, k := range keys {
		m := w.moves[k]
		var err error
		if m.create {
			_, err = tx.ExecContext(ctx, `
				INSERT INTO usage_total AS u (namespace, customer_id, metric, quantity) VALUES ($1, $2, $3, $4)
				ON CONFLICT (namespace, customer_id, metric) DO UPDATE
				SET quantity = u.quantity + EXCLUDED.quantity, updated_at = CURRENT_TIMESTAMP`,
				k.namespace, k.customerID, k.metric, m.by)
		} else {
			_, err = tx.ExecContext(ctx, `UPDATE usage_total SET quantity = quantity + $4, updated_at = CURRENT_TIMESTAMP
				WHERE namespace = $1 AND customer_id = $2 AND metric = $3`, k.namespace, k.customerID, k.metric, m.by)
		}
		if err != nil {
			return fmt.Errorf("add usage %s/%s: %w", k.customerID, k.metric, err)
		}
	}
	return nil
}
