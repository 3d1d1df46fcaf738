package subscription

import (
	"os"
	"testing"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// stripeFields reads what applyStripe is given (ledger.On reads it so).
var stripeFields = provider.FieldsOf[stripeEvent]()

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
