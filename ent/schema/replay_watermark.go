package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// ReplayWatermark is the replay module's record of how far scheduled
// reconciliation has caught up, per source.
type ReplayWatermark struct {
	ent.Schema
}

// Annotations names the table.
func (ReplayWatermark) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("replay_watermark")}
}

// Fields of a watermark.
func (ReplayWatermark) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("source").NotEmpty().Immutable(),
		field.Time("watermark").Comment("Events created before this were reconciled."),
		field.Time("updated_at").Default(time.Now).UpdateDefault(time.Now).
			Annotations(entsql.Default("CURRENT_TIMESTAMP")),
	}
}

// Indexes of watermarks.
func (ReplayWatermark) Indexes() []ent.Index {
	return []ent.Index{index.Fields("source").Unique()}
}
