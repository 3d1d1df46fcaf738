package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Invoice is the invoice module's latest state of one provider invoice (a
// Stripe in_...): its status, amounts and customer.
type Invoice struct {
	ent.Schema
}

// Annotations names the table.
func (Invoice) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("invoice")}
}

// Fields of an invoice.
func (Invoice) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("namespace").NotEmpty().Immutable().
			Comment("Ledger namespace of the events that write the row: every key carries it."),
		field.String("provider").NotEmpty().Immutable(),
		field.String("external_id").NotEmpty().Immutable().Comment("Stripe in_..."),
		field.String("customer_id").Default(""),
		field.String("status").Default("").Comment("draft, open, paid, uncollectible or void."),
		field.Int64("amount_due").Default(0).Comment("Minor units."),
		field.Int64("amount_paid").Default(0).Comment("Minor units."),
		field.String("currency").Default(""),
		field.Int64("version").Default(0).Comment("Stripe event created, Unix seconds, of the event that wrote the row."),
		field.String("event_id").Default("").Comment("The event that wrote the row."),
		field.Time("updated_at").Default(time.Now).UpdateDefault(time.Now).
			Annotations(entsql.Default("CURRENT_TIMESTAMP")),
	}
}

// Indexes of invoices: every unique key starts with the namespace.
func (Invoice) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("namespace", "provider", "external_id").Unique(),
	}
}
