package provider

import (
	"encoding/json"
	"os"
	"testing"
)

func BenchmarkParseStripe(b *testing.B) {
	body, err := os.ReadFile("../../../testdata/providers/stripe/customer.subscription.updated.json")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("scanMembers", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := parseStripe(nil, body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var ev stripeFields
			if err := json.Unmarshal(body, &ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
