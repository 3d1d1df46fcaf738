package usage

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hookledger/hookledger/modules/ledger"
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
	return Add(ctx, tx, e.Data)
}

// Add adds r's quantity to its total.
func Add(ctx context.Context, tx *ledger.Tx, r Recorded) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO usage_total AS u (customer_id, metric, quantity) VALUES ($1, $2, $3)
		ON CONFLICT (customer_id, metric) DO UPDATE
		SET quantity = u.quantity + EXCLUDED.quantity, updated_at = CURRENT_TIMESTAMP`,
		r.CustomerID, r.Metric, r.Quantity)
	if err != nil {
		return fmt.Errorf("add usage %s/%s: %w", r.CustomerID, r.Metric, err)
	}
	return nil
}
