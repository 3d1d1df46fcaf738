package payment

import (
	"context"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// erase redacts the customer of every payment of customer in namespace
// (all when empty): customer_id becomes ledger.Erased, and the amounts,
// currency, status and version stay. The row is kept, not deleted: its
// existence is what makes the receipt once-only (a receipt is enqueued by
// the statement that creates the row), and a refund or invoice event of
// the payment delivered later for the first time would otherwise create
// it again, with the customer and a second receipt. The redaction marker
// is not empty, so the merge, which fills only an empty customer, never
// writes the customer back. Rows are locked in key order, the order an
// apply's write locks them in.
func erase(ctx context.Context, tx *ledger.Tx, customer, namespace string, _ bool) (int64, error) {
	return ledger.RedactRows(ctx, tx, "payment", "customer_id", "namespace, provider, external_id", customer, namespace)
}
