package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// EntitlementSummary is the newest active entitlement summary the
// entitlement module applied for a customer: its version guards the
// customer's entitlement rows, also when the newest set is empty.
type EntitlementSummary struct {
	ent.Schema
}

// Annotations names the table.
func (EntitlementSummary) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("entitlement_summary")}
}

// Fields of a customer's newest summary.
func (EntitlementSummary) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("namespace").NotEmpty().Immutable().
			Comment("Ledger namespace of the events that write the row: every key carries it."),
		field.String("provider").NotEmpty().Immutable(),
		field.String("customer_id").NotEmpty().Immutable().Comment("Stripe cus_..."),
		field.Int64("version").Comment("Stripe event created, Unix seconds."),
		field.String("features").Default("").
			Comment("The summary's lookup_key=feature_id pairs, sorted, comma-separated: the tie-break of two summaries of one second."),
		field.String("event_id").Default("").Comment("The event of the summary."),
		field.Time("updated_at").Default(time.Now).UpdateDefault(time.Now).
			Annotations(entsql.Default("CURRENT_TIMESTAMP")),
	}
}

// Indexes of summaries: every unique key starts with the namespace.
func (EntitlementSummary) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("namespace", "provider", "customer_id").Unique(),
	}
}
