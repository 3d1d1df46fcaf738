package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// UsageTotal is the usage module's running total of one metric for one
// customer, fed by delta events.
type UsageTotal struct {
	ent.Schema
}

// Annotations names the table.
func (UsageTotal) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("usage_total")}
}

// Fields of a usage total.
func (UsageTotal) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("namespace").NotEmpty().Immutable().
			Comment("Ledger namespace of the events that feed the total: each sender has totals of its own."),
		field.String("customer_id").NotEmpty().Immutable(),
		field.String("metric").NotEmpty().Immutable(),
		field.Int64("quantity").Default(0),
		field.Time("updated_at").Default(time.Now).UpdateDefault(time.Now).
			Annotations(entsql.Default("CURRENT_TIMESTAMP")),
	}
}

// Indexes of usage totals.
func (UsageTotal) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("namespace", "customer_id", "metric").Unique(),
	}
}
