package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// WebhookEvent is the ledger: one row per provider event, keyed by
// (namespace, event_id). The row is the dedup record, the audit log and the
// input of replay.
type WebhookEvent struct {
	ent.Schema
}

// Annotations names the table.
func (WebhookEvent) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("webhook_event")}
}

// Fields of the ledger row.
func (WebhookEvent) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("namespace").NotEmpty().Immutable().
			Comment("Dedup scope; defaults to the provider name."),
		field.String("event_id").NotEmpty().Immutable().
			Comment("The provider's own event id."),
		field.String("provider").NotEmpty().Immutable().
			Comment("Provider whose conventions the event follows."),
		field.String("source").NotEmpty().Immutable().
			Comment("Configured source name the delivery came through."),
		field.String("event_type").Immutable(),
		// The delivered body, byte for byte, so that its signature can be
		// checked again: text, which its migration compresses with lz4
		// (chosen by measurement, docs/BENCHMARKS.md). Read it as JSON in
		// SQL with payload::jsonb.
		// A string in Go, so that it is sent as text whatever pgx's query
		// mode: through a transaction pooler (no prepared statements) pgx
		// would send bytes as bytea, and the column would store their hex.
		field.Text("payload").Immutable().
			SchemaType(map[string]string{dialect.Postgres: "text"}),
		field.Enum("status").Values("claimed", "processing", "settled", "failed", "discarded").Default("claimed"),
		field.Int("attempts").Default(0).
			Comment("Apply attempts, successful or not."),
		field.String("last_error").Optional().Nillable(),
		field.Time("received_at").Default(time.Now).Immutable().
			Annotations(entsql.Default("CURRENT_TIMESTAMP")),
		field.Time("settled_at").Optional().Nillable(),
		field.Time("occurred_at").Optional().Nillable().Immutable().
			Comment("When the provider says the event happened."),
		field.JSON("headers", map[string]string{}).Optional().Immutable().
			SchemaType(map[string]string{dialect.Postgres: "jsonb"}).
			Comment("Provider headers of the delivery, signatures left out."),
		field.Int("secret_index").Optional().Nillable().Immutable().
			Comment("Position of the configured secret that matched; null for replays."),
		field.String("secret_fingerprint").Optional().Nillable().Immutable().
			Comment("Stable short hash of the secret or public key that matched (never the secret): it names the secret across rotations, where the index moves; null for replays."),
		field.Int64("clock_skew_ms").Optional().Nillable().Immutable().
			Comment("Receive time minus the signed timestamp, in milliseconds."),
		field.Bool("replayed").Default(false).Immutable(),
		field.Int("failures").Default(0).
			Comment("Handler failures since the last settle or requeue. Outages and crashes are not counted; River's job attempt drives the backoff."),
		field.Time("failing_since").Optional().Nillable().
			Comment("First handler failure since the last settle or requeue."),
		field.Strings("handlers").Optional().
			SchemaType(map[string]string{dialect.Postgres: "jsonb"}).
			Comment("Modules whose handlers applied the event at its last apply; empty when none matched its type, null before its first apply."),
		field.JSON("failure_log", []Failure{}).Optional().
			SchemaType(map[string]string{dialect.Postgres: "jsonb"}).
			Comment("The last handler failures, oldest first, kept after the event settles."),
		field.String("discard_reason").Optional().Nillable().
			Comment("Why an operator discarded the event; null unless discarded."),
		field.String("body_digest").Optional().Nillable().Immutable().
			Comment("SHA-256 of what the signature covers, for providers that sign only the body (GitHub, Shopify: with the topic); null elsewhere."),
		field.String("body_identity").Optional().Nillable().
			Comment("Digest of the body less the provider's per-attempt fields (provider.BodyIdentity), which a duplicate's is compared with instead of reading the stored body: `sha256:<hex>`, or with PAYLOAD_KEYS `<key id>:<hex HMAC-SHA256>` under a key derived from that payload key, so it confirms no guessed body; null before it was kept, and once erased."),
		field.Time("erased_at").Optional().Nillable().
			Comment("When hookledger erase replaced the payload and headers by a redaction marker; null otherwise."),
	}
}

// Failure is one entry of a ledger row's failure_log.
type Failure struct {
	// Attempt is the row's apply attempt that failed (attempts after it).
	Attempt int `json:"attempt"`
	// JobID is the River job whose run failed.
	JobID int64     `json:"job_id,omitempty"`
	At    time.Time `json:"at"`
	// Handler names the module and handler that failed ("payment.stripeChargeRefunded").
	Handler string `json:"handler,omitempty"`
	Error   string `json:"error"`
}

// Indexes of the ledger.
func (WebhookEvent) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("namespace", "event_id").Unique(),
		// Backlog scans: only claimed and failed rows are indexed.
		index.Fields("status", "received_at").
			StorageKey("webhookevent_pending").
			Annotations(entsql.IndexWhere(`((status)::text = 'claimed'::text) OR ((status)::text = 'failed'::text)`)),
		// Failed rows by when they started failing: the oldest failure's
		// age (hookledger_ledger_oldest_failed_seconds) is one probe.
		index.Fields("failing_since").
			StorageKey("webhookevent_failing_since").
			Annotations(entsql.IndexWhere(`((status)::text = 'failed'::text)`)),
		// Discarded rows, counted apart from the backlog.
		index.Fields("received_at").
			StorageKey("webhookevent_discarded").
			Annotations(entsql.IndexWhere(`((status)::text = 'discarded'::text)`)),
		index.Fields("received_at"),
		// A second claim key for providers that sign only the body: the
		// same signed body under another, unsigned, id is a replay.
		index.Fields("namespace", "body_digest").Unique().
			StorageKey("webhookevent_body_digest").
			Annotations(entsql.IndexWhere(`(body_digest IS NOT NULL)`)),
	}
}
