package usage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/core/provider"
)

// Register adds the module's handler and its writes.
func Register(reg *ledger.Registry) {
	m := &module{
		deltas: ledger.NewWrite(reg, ledger.WriteFuncs[eventKey, Recorded]{Merge: replaceDelta, Flush: flushDeltas}),
		totals: ledger.NewWrite(reg, ledger.WriteFuncs[totalKey, move]{Merge: addMoves, Flush: flushTotals}),
	}
	reg.Handle("standard", "usage.recorded", m.apply)
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

var shapeFields = provider.FieldsOf[shapes]()

// errShape is the failure of a body of neither shape.
var errShape = errors.New(`usage.recorded needs customer_id and metric: ` +
	`enveloped {"type","timestamp","data":{"customer_id","metric","quantity"}} ` +
	`or verbatim {"customer_id","metric","quantity"}`)

// read reads a usage.recorded body of either shape. The envelope is read
// first: its data names the customer and the metric in every body of that
// shape, whatever else the body carries.
func read(payload []byte) (Recorded, error) {
	s, err := shapeFields.Read(payload)
	if err != nil {
		return Recorded{}, fmt.Errorf("decode usage.recorded: %w", err)
	}
	switch {
	case s.EnvelopedCustomerID != "" && s.EnvelopedMetric != "":
		return Recorded{s.EnvelopedCustomerID, s.EnvelopedMetric, s.EnvelopedQuantity}, nil
	case s.CustomerID != "" && s.Metric != "":
		return Recorded{s.CustomerID, s.Metric, s.Quantity}, nil
	}
	return Recorded{}, errShape
}

func (m *module) apply(ctx context.Context, tx *ledger.Tx, ev *ledger.Event) error {
	r, err := read(ev.Payload)
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

// flushDeltas records what each event added, in one statement.
func flushDeltas(ctx context.Context, tx *ledger.Tx, entries []ledger.Entry[eventKey, Recorded]) error {
	n := len(entries)
	namespaces, ids, customers, metrics, quantities := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]int64, n)
	for i, e := range entries {
		namespaces[i], ids[i] = e.Key.Namespace, e.Key.EventID
		customers[i], metrics[i], quantities[i] = e.Value.CustomerID, e.Value.Metric, e.Value.Quantity
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO usage_delta (namespace, event_id, customer_id, metric, quantity)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[])
		ON CONFLICT (namespace, event_id) DO UPDATE
		SET customer_id = EXCLUDED.customer_id, metric = EXCLUDED.metric, quantity = EXCLUDED.quantity, applied_at = CURRENT_TIMESTAMP`,
		namespaces, ids, customers, metrics, quantities)
	if err != nil {
		return fmt.Errorf("record %d usage delta(s): %w", n, err)
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
	var create, update columns
	for _, e := range entries {
		if e.Value.create {
			create.add(e.Key, e.Value.by)
		} else {
			update.add(e.Key, e.Value.by)
		}
	}
	if len(create.customers) > 0 {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO usage_total AS u (namespace, customer_id, metric, quantity)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])
			ON CONFLICT (namespace, customer_id, metric) DO UPDATE
			SET quantity = u.quantity + EXCLUDED.quantity, updated_at = CURRENT_TIMESTAMP`,
			create.namespaces, create.customers, create.metrics, create.by)
		if err != nil {
			return fmt.Errorf("add usage to %d total(s): %w", len(create.customers), err)
		}
	}
	if len(update.customers) > 0 {
		_, err := tx.ExecContext(ctx, `
			UPDATE usage_total u SET quantity = u.quantity + m.by, updated_at = CURRENT_TIMESTAMP
			FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS m(namespace, customer_id, metric, by)
			WHERE u.namespace = m.namespace AND u.customer_id = m.customer_id AND u.metric = m.metric`,
			update.namespaces, update.customers, update.metrics, update.by)
		if err != nil {
			return fmt.Errorf("move %d usage total(s): %w", len(update.customers), err)
		}
	}
	return nil
}

// columns are totals' keys and moves, a slice per column.
type columns struct {
	namespaces, customers, metrics []string
	by                             []int64
}

func (c *columns) add(k totalKey, by int64) {
	c.namespaces, c.customers, c.metrics = append(c.namespaces, k.Namespace), append(c.customers, k.CustomerID), append(c.metrics, k.Metric)
	c.by = append(c.by, by)
}
