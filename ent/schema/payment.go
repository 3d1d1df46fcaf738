package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Payment is the payment module's record of one provider payment (a Stripe
// PaymentIntent, a Paddle transaction) and how much of it was refunded.
type Payment struct {
	ent.Schema
}

// Annotations names the table.
func (Payment) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("payment")}
}

// Fields of a payment.
func (Payment) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("namespace").NotEmpty().Immutable().
			Comment("Ledger namespace of the events that write the row."),
		field.String("provider").NotEmpty().Immutable(),
		field.String("external_id").NotEmpty().Immutable().
			Comment("Stripe pi_..., Paddle txn_..."),
		field.String("customer_id").Default(""),
		field.Int64("amount").Default(0).Comment("Minor units."),
		field.Int64("amount_refunded").Default(0).
			Comment("Cumulative, minor units; only grows."),
		field.String("currency").Default(""),
		field.Enum("status").Values("succeeded", "partially_refunded", "refunded"),
		field.Int64("version").Default(0).
			Comment("Newest provider order key seen: Stripe event created (s), Paddle occurred_at (µs)."),
		field.Time("created_at").Default(time.Now).Immutable().
			Annotations(entsql.Default("CURRENT_TIMESTAMP")),
		field.Time("updated_at").Default(time.Now).UpdateDefault(time.Now).
			Annotations(entsql.Default("CURRENT_TIMESTAMP")),
	}
}

// Indexes of payments.
func (Payment) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("namespace", "provider", "external_id").Unique(),
	}
}
