package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// WebhookKey is a dedup key kept after prune removed its ledger row: a
// pruned event's redelivery is still a duplicate. One row per key: an
// event's namespace and id, and its body digest where its source uses
// one, each hashed (ledger.KeyHashSQL), with no payload.
type WebhookKey struct {
	ent.Schema
}

// Annotations names the table.
func (WebhookKey) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("webhook_key")}
}

// Fields of a kept key.
func (WebhookKey) Fields() []ent.Field {
	return []ent.Field{
		field.Bytes("id").StorageKey("key_hash").Immutable().
			Comment("The first 16 bytes of SHA-256 over the namespace, the kind of key (event id or body digest) and its value."),
		field.Time("received_on").Immutable().
			SchemaType(map[string]string{dialect.Postgres: "date"}).
			Comment("The day its event was received: KEY_RETENTION counts from it."),
	}
}

// Indexes of the kept keys.
func (WebhookKey) Indexes() []ent.Index {
	return []ent.Index{
		// Expiry by KEY_RETENTION. Keys are kept in the order their
		// events were received, so a block range index serves it at a
		// fraction of a B-tree's size.
		index.Fields("received_on").Annotations(entsql.IndexType("BRIN")),
	}
}
