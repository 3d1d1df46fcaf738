package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// AlertState is the alert module's record of each alert's last message:
// the leader's check reads it and writes the next state in the same
// transaction that inserts the message's notify job, so a state is sent
// once, however long it lasts and whatever River keeps of its jobs. An
// operations table, keyed by the alert, not by a namespace.
type AlertState struct {
	ent.Schema
}

// Annotations names the table.
func (AlertState) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("alert_state")}
}

// Fields of an alert's state.
func (AlertState) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("key").NotEmpty().Immutable().
			Comment(`The alert's instance: its rule, and the group or source it is about ("failure_group:3f9a...", "signature_failures:stripe").`),
		field.String("name").NotEmpty().
			Comment("The rule's name."),
		field.Enum("status").Values("firing", "resolved").
			Comment("The state the last message sent."),
		field.Int("level").Default(0).
			Comment("The level the last firing message sent (a failure group's count, tenfold): a higher one is sent again."),
		field.Text("summary").
			Comment("The last message's summary."),
		field.Time("fired_at").
			Comment("When the alert last started firing."),
		field.Time("resolved_at").Optional().Nillable().
			Comment("When the alert last resolved; null while it fires."),
		field.Time("updated_at").Default(time.Now).UpdateDefault(time.Now).
			Annotations(entsql.Default("CURRENT_TIMESTAMP")).
			Comment("When the last message was sent."),
	}
}

// Indexes of the alert states.
func (AlertState) Indexes() []ent.Index {
	return []ent.Index{index.Fields("key").Unique()}
}
