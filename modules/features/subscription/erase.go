package subscription

import (
	"context"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// erase redacts the customer of every subscription of customer in
// namespace (all when empty): customer_id becomes ledger.Erased, and the
// row keeps its status, plan, version and rank. The row is kept, not
// deleted, because its version is what keeps an event from moving it
// back: deleted, the subscription could be written again by an older
// event delivered later for the first time (a reordered or late Stripe
// retry of another event id), with the customer in it. Kept, such an
// event is stale and changes nothing; only a newer event, new data from
// the provider, writes a customer again. Rows are locked in key order, the
// order an apply's write locks them in.
func erase(ctx context.Context, tx *ledger.Tx, customer, namespace string, _ bool) (int64, error) {
	return ledger.RedactRows(ctx, tx, "subscription", "customer_id", "namespace, provider, external_id", customer, namespace)
}
