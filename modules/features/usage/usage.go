package usage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hookledger/hookledger/modules/core/ledger"
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
	var e struct {
		Data Recorded `json:"data"`
	}
	if err := json.Unmarshal(ev.Payload, &e); err != nil {
		return ledger.Permanent(fmt.Errorf("decode usage.recorded: %w", err))
	}
	if e.Data.CustomerID == "" || e.Data.Metric == "" {
		return ledger.Permanent(fmt.Errorf("usage.recorded without customer_id or metric"))
	}
	return record(ctx, tx, ev, e.Data)
}

// record makes r the event's effect on its total. The delta each event
// added is kept in usage_delta, so that applying an event again (a forced
// requeue after a handler fix, or a duplicate under CLAIM_MODE=log-only)
// replaces its earlier delta instead of adding another: the total moves by
// the difference, and by nothing when the event reads the same. The ledger
// row's lock, held by the apply, serializes applies of one event.
func record(ctx context.Context, tx *ledger.Tx, ev *ledger.Event, r Recorded) error {
	var prev Recorded
	err := tx.QueryRowContext(ctx, `SELECT customer_id, metric, quantity FROM usage_delta WHERE namespace = $1 AND event_id = $2`,
		ev.Namespace, ev.EventID).Scan(&prev.CustomerID, &prev.Metric, &prev.Quantity)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("read usage delta of %s: %w", ev.EventID, err)
	case prev.CustomerID != r.CustomerID || prev.Metric != r.Metric:
		// The fixed handler reads another total: take the delta off the old one.
		if _, err := tx.ExecContext(ctx, `UPDATE usage_total SET quantity = quantity - $4, updated_at = CURRENT_TIMESTAMP
			WHERE namespace = $1 AND customer_id = $2 AND metric = $3`, ev.Namespace, prev.CustomerID, prev.Metric, prev.Quantity); err != nil {
			return fmt.Errorf("undo usage delta of %s: %w", ev.EventID, err)
		}
		prev = Recorded{}
	}
	_, err = tx.ExecContext(ctx, `
		WITH delta AS (
			INSERT INTO usage_delta (namespace, event_id, customer_id, metric, quantity) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (namespace, event_id) DO UPDATE
			SET customer_id = EXCLUDED.customer_id, metric = EXCLUDED.metric, quantity = EXCLUDED.quantity, applied_at = CURRENT_TIMESTAMP)
		INSERT INTO usage_total AS u (namespace, customer_id, metric, quantity) VALUES ($1, $3, $4, $5 - $6)
		ON CONFLICT (namespace, customer_id, metric) DO UPDATE
		SET quantity = u.quantity + EXCLUDED.quantity, updated_at = CURRENT_TIMESTAMP`,
		ev.Namespace, ev.EventID, r.CustomerID, r.Metric, r.Quantity, prev.Quantity)
	if err != nil {
		return fmt.Errorf("add usage %s/%s: %w", r.CustomerID, r.Metric, err)
	}
	return nil
}
