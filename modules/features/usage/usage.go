package usage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// Register adds the module's handler and its writes.
func Register(reg *ledger.Registry) {
	m := &module{
		deltas: ledger.NewWrite(reg, ledger.WriteFuncs[eventKey, Recorded]{Merge: replaceDelta, Flush: flushDeltas}),
		totals: ledger.NewWrite(reg, ledger.WriteFuncs[totalKey, move]{Merge: addMoves, Flush: flushTotals}),
	}
	ledger.On(reg, "standard", "usage.recorded", m.apply)
	reg.Erase(erase)
}

type module struct {
	deltas *ledger.Write[eventKey, Recorded]
	totals *ledger.Write[totalKey, move]
}

// Recorded is the data of a usage.recorded event.
type Recorded struct {
	CustomerID string
	Metric     string
	Quantity   int64
}

// shapes are the two bodies a usage.recorded event comes in: the
// envelope {"type","timestamp","data":{...}} of the Standard Webhooks
// specification, and the data alone, as a sender that publishes its data
// verbatim (Hookdeck Outpost) sends it, its type in webhook-topic.
type shapes struct {
	EnvelopedCustomerID string `field:"data.customer_id"`
	EnvelopedMetric     string `field:"data.metric"`
	EnvelopedQuantity   int64  `field:"data.quantity"`
	CustomerID          string `field:"customer_id"`
	Metric              string `field:"metric"`
	Quantity            int64  `field:"quantity"`
}

// errShape is the failure of a body of neither shape.
var errShape = errors.New(`usage.recorded needs customer_id and metric: ` +
	`enveloped {"type","timestamp","data":{"customer_id","metric","quantity"}} ` +
	`or verbatim {"customer_id","metric","quantity"}`)

// recorded is what a usage.recorded body of either shape records. The
// envelope is read first: its data names the customer and the metric in
// every body of that shape, whatever else the body carries.
func (s shapes) recorded() (Recorded, error) {
	switch {
	case s.EnvelopedCustomerID != "" && s.EnvelopedMetric != "":
		return Recorded{s.EnvelopedCustomerID, s.EnvelopedMetric, s.EnvelopedQuantity}, nil
	case s.CustomerID != "" && s.Metric != "":
		return Recorded{s.CustomerID, s.Metric, s.Quantity}, nil
	}
	return Recorded{}, errShape
}

func (m *module) apply(ctx context.Context, tx *ledger.Tx, ev *ledger.Event, s shapes) error {
	r, err := s.recorded()
	if err != nil {
		return ledger.Permanent(err)
	}
	return m.record(ctx, tx, ev, r)
}

type (
	eventKey struct{ Namespace, EventID string }
	totalKey struct{ Namespace, CustomerID, Metric string }
)

// record makes r the event's effect on its total. The delta each event
// added is kept in usage_delta, so that applying an event again (a forced
// requeue after a handler fix, or a duplicate under CLAIM_MODE=log-only)
// replaces its earlier delta instead of adding another: the total moves by
// the difference, and by nothing when the event reads the same. The ledger
// row's lock, held by the apply, serializes applies of one event. The
// writes are made when the apply ends (flushDeltas, flushTotals).
func (m *module) record(ctx context.Context, tx *ledger.Tx, ev *ledger.Event, r Recorded) error {
	ek := eventKey{ev.Namespace, ev.EventID}
	prev, ok := m.deltas.Get(tx, ek)
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
		m.totals.Put(tx, totalKey{ev.Namespace, prev.CustomerID, prev.Metric}, move{by: -prev.Quantity})
		prev = Recorded{}
	}
	m.totals.Put(tx, totalKey{ev.Namespace, r.CustomerID, r.Metric}, move{by: r.Quantity - prev.Quantity, create: true})
	m.deltas.Put(tx, ek, r)
	return nil
}

// replaceDelta keeps an event's newer delta: applied again, the event
// replaces what it added.
func replaceDelta(_, newer Recorded) Recorded { return newer }

// deltaRow is a usage_delta row.
type deltaRow struct {
	Namespace  string `col:"namespace"`
	EventID    string `col:"event_id"`
	CustomerID string `col:"customer_id"`
	Metric     string `col:"metric"`
	Quantity   int64  `col:"quantity"`
}

// flushDeltas records what each event added, in one statement.
func flushDeltas(ctx context.Context, tx *ledger.Tx, entries []ledger.Entry[eventKey, Recorded]) error {
	rows := make([]deltaRow, len(entries))
	for i, e := range entries {
		rows[i] = deltaRow{e.Key.Namespace, e.Key.EventID, e.Value.CustomerID, e.Value.Metric, e.Value.Quantity}
	}
	from, args := ledger.Unnest(rows, 1)
	_, err := tx.ExecContext(ctx, `
		INSERT INTO usage_delta (namespace, event_id, customer_id, metric, quantity)
		SELECT k.namespace, k.event_id, k.customer_id, k.metric, k.quantity FROM `+from+`
		ON CONFLICT (namespace, event_id) DO UPDATE
		SET customer_id = EXCLUDED.customer_id, metric = EXCLUDED.metric, quantity = EXCLUDED.quantity, applied_at = CURRENT_TIMESTAMP`,
		args...)
	if err != nil {
		return fmt.Errorf("record %d usage delta(s): %w", len(rows), err)
	}
	return nil
}

// move is what an apply adds to one total; create makes the total when it
// has no row yet (an event's own delta does; taking an old delta off a
// total only updates it, as that total was made with the delta).
type move struct {
	by     int64
	create bool
}

// addMoves sums what a transaction's events add to one total: a sum does
// not depend on the order of its terms, so the total is that of writing
// each event alone, in order.
func addMoves(older, newer move) move {
	return move{by: older.by + newer.by, create: older.create || newer.create}
}

// flushTotals moves the totals, those it may create in one statement and
// those it only updates in another.
func flushTotals(ctx context.Context, tx *ledger.Tx, entries []ledger.Entry[totalKey, move]) error {
	var create, update []totalMove
	for _, e := range entries {
		m := totalMove{e.Key.Namespace, e.Key.CustomerID, e.Key.Metric, e.Value.by}
		if e.Value.create {
			create = append(create, m)
		} else {
			update = append(update, m)
		}
	}
	if len(create) > 0 {
		from, args := ledger.Unnest(create, 1)
		_, err := tx.ExecContext(ctx, `
			INSERT INTO usage_total AS u (namespace, customer_id, metric, quantity)
			SELECT k.namespace, k.customer_id, k.metric, k.by FROM `+from+`
			ON CONFLICT (namespace, customer_id, metric) DO UPDATE
			SET quantity = u.quantity + EXCLUDED.quantity, updated_at = CURRENT_TIMESTAMP`, args...)
		if err != nil {
			return fmt.Errorf("add usage to %d total(s): %w", len(create), err)
		}
	}
	if len(update) > 0 {
		from, args := ledger.Unnest(update, 1)
		_, err := tx.ExecContext(ctx, `
			UPDATE usage_total u SET quantity = u.quantity + k.by, updated_at = CURRENT_TIMESTAMP
			FROM `+from+`
			WHERE u.namespace = k.namespace AND u.customer_id = k.customer_id AND u.metric = k.metric`, args...)
		if err != nil {
			return fmt.Errorf("move %d usage total(s): %w", len(update), err)
		}
	}
	return nil
}

// totalMove is what an apply adds to one usage_total row.
type totalMove struct {
	Namespace  string `col:"namespace"`
	CustomerID string `col:"customer_id"`
	Metric     string `col:"metric"`
	By         int64  `col:"by"`
}
