package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Entitlement is one feature a customer is entitled to, by the newest
// active entitlement summary the entitlement module applied: a customer
// has one row per active feature.
type Entitlement struct {
	ent.Schema
}

// Annotations names the table.
func (Entitlement) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("entitlement")}
}

// Fields of an active entitlement.
func (Entitlement) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("namespace").NotEmpty().Immutable().
			Comment("Ledger namespace of the events that write the row: every key carries it."),
		field.String("provider").NotEmpty().Immutable(),
		field.String("customer_id").NotEmpty().Immutable().Comment("Stripe cus_..."),
		field.String("lookup_key").NotEmpty().Immutable().Comment("The feature's lookup_key."),
		field.String("feature_id").Default("").Comment("Stripe feat_..."),
		field.Int64("version").Comment("Stripe event created, Unix seconds, of the summary that holds it."),
		field.Time("updated_at").Default(time.Now).UpdateDefault(time.Now).
			Annotations(entsql.Default("CURRENT_TIMESTAMP")),
	}
}

// Indexes of active entitlements: every unique key starts with the
// namespace.
func (Entitlement) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("namespace", "provider", "customer_id", "lookup_key").Unique(),
	}
}
