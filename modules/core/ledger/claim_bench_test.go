package ledger_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// BenchmarkClaimBatch claims batches of 26 real 7 KB Stripe deliveries in
// one statement each, as one committer does at the peak of `hookledger
// bench`: its allocations per batch are the claim's own, from the bodies
// to PostgreSQL's answer.
func BenchmarkClaimBatch(b *testing.B) {
	body, err := os.ReadFile("../../../testdata/providers/stripe/customer.subscription.updated.json")
	if err != nil {
		b.Fatal(err)
	}
	const batch = 26
	h := ledgertest.New(b, 0, nil)
	ctx := context.Background()
	rows := make([]ledger.Claim, batch)
	n := 0
	b.SetBytes(int64(batch * len(body)))
	b.ReportAllocs()
	for b.Loop() {
		for i := range rows {
			n++
			id := "evt_bench_" + strconv.Itoa(n)
			// One body for every id: a Stripe claim's only key is its id.
			rows[i] = ledger.Claim{Namespace: "stripe", EventID: id, Provider: "stripe", Source: "stripe",
				Type: "customer.subscription.updated", Payload: body,
				Headers: map[string]string{"User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)"}}
		}
		if _, err := ledger.ClaimBatch(ctx, h.Claimer, rows); err != nil {
			b.Fatal(err)
		}
	}
}
