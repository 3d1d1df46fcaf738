package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// DeliveryStat counts deliveries per source, minute and outcome. Every
// receiver process aggregates its answers in memory and adds them to these
// rows every few seconds, so the counts agree across processes and
// restarts without a write per request.
type DeliveryStat struct {
	ent.Schema
}

// Annotations names the table.
func (DeliveryStat) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("delivery_stat")}
}

// Fields of a count.
func (DeliveryStat) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.Time("minute").Immutable().
			Comment("Start of the minute the deliveries were answered in (UTC)."),
		field.String("source").NotEmpty().Immutable().
			Comment("Configured source name, or unknown."),
		field.String("outcome").NotEmpty().Immutable().
			Comment("claimed, duplicate, invalid_signature, bad_request, too_large, unavailable, error, not_found, and the extra tallies replayed and would_skip."),
		field.Int64("count").Default(0),
	}
}

// Indexes of the counts: the upsert key, which also serves the time-window
// reads and the prune.
func (DeliveryStat) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("minute", "source", "outcome").Unique(),
	}
}
