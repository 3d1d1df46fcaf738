package subscription

import (
	"os"
	"testing"
)

func BenchmarkDecodeStripeEvent(b *testing.B) {
	body, err := os.ReadFile("../../../testdata/providers/stripe/customer.subscription.updated.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := stripeFields.Read(body); err != nil {
			b.Fatal(err)
		}
	}
}
