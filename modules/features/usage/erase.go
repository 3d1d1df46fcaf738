package usage

import (
	"context"
	"fmt"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// erase deletes the usage of customer in namespace (all when empty): the
// customer's deltas and its totals, which the deltas sum. The customer id
// is part of a total's key, so the rows cannot be kept with it redacted
// (two erased customers' totals of one metric would become one), and
// keeping both or neither keeps every total the sum of its deltas. Nothing
// can add an erased event's delta again: its redelivery is a duplicate,
// and an erased ledger row holds no payload left to apply. A later event of the
// customer, new data from the sender, starts a new total. Deltas go
// first, then totals, each locked in key order, as an apply writes them.
func erase(ctx context.Context, tx *ledger.Tx, customer, namespace string, _ bool) (int64, error) {
	var n int64
	for _, q := range []struct{ table, key string }{
		{"usage_delta", "namespace, event_id"},
		{"usage_total", "namespace, customer_id, metric"},
	} {
		res, err := tx.ExecContext(ctx, `
			WITH hit AS (
				SELECT id FROM `+q.table+` WHERE customer_id = $1 AND ($2 = '' OR namespace = $2) ORDER BY `+q.key+` FOR UPDATE)
			DELETE FROM `+q.table+` t USING hit WHERE t.id = hit.id`, customer, namespace)
		if err != nil {
			return n, fmt.Errorf("delete %s: %w", q.table, err)
		}
		rows, err := res.RowsAffected()
		if err != nil {
			return n, fmt.Errorf("delete %s: %w", q.table, err)
		}
		n += rows
	}
	return n, nil
}
