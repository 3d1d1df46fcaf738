package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Subscription is the subscription module's business state: the newest known
// state of one provider subscription, guarded by a monotonic version.
type Subscription struct {
	ent.Schema
}

// Annotations names the table.
func (Subscription) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("subscription")}
}

// Fields of a subscription.
func (Subscription) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("namespace").NotEmpty().Immutable().
			Comment("Ledger namespace of the events that write the row: a second account never changes the first account's rows."),
		field.String("provider").NotEmpty().Immutable(),
		field.String("external_id").NotEmpty().Immutable(),
		field.String("customer_id").Default(""),
		field.String("plan").Default(""),
		field.String("status"),
		field.Int64("version").
			Comment("Provider order key: Stripe event created (s), Paddle occurred_at (µs)."),
		field.Int("rank").Default(0).
			Comment("Tie-break precedence between two events of the same version."),
		field.String("event_id").Default("").
			Comment("The ledger event that wrote this state."),
		field.Time("updated_at").Default(time.Now).UpdateDefault(time.Now).
			Annotations(entsql.Default("CURRENT_TIMESTAMP")),
	}
}

// Indexes of subscriptions.
func (Subscription) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("namespace", "provider", "external_id").Unique(),
	}
}
