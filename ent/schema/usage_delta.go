package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// UsageDelta is the usage module's record of what each event added to a
// total. A forced re-apply of an event replaces its delta instead of adding
// it again: the total moves by the difference.
type UsageDelta struct {
	ent.Schema
}

// Annotations names the table.
func (UsageDelta) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("usage_delta")}
}

// Fields of a usage delta.
func (UsageDelta) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("namespace").NotEmpty().Immutable(),
		field.String("event_id").NotEmpty().Immutable().
			Comment("The ledger event whose quantity this is."),
		field.String("customer_id").NotEmpty(),
		field.String("metric").NotEmpty(),
		field.Int64("quantity"),
		field.Time("applied_at").Default(time.Now).UpdateDefault(time.Now).
			Annotations(entsql.Default("CURRENT_TIMESTAMP")),
	}
}

// Indexes of usage deltas.
func (UsageDelta) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("namespace", "event_id").Unique(),
	}
}
