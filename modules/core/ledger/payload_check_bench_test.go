package ledger

import (
	"os"
	"testing"
)

// BenchmarkCheckPayload checks a real 7 KB Stripe delivery, as every
// claim does before it reaches the database.
func BenchmarkCheckPayload(b *testing.B) {
	body, err := os.ReadFile("../../../testdata/providers/stripe/customer.subscription.updated.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := CheckPayload(body); err != nil {
			b.Fatal(err)
		}
	}
}
