package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// LedgerIdentity names one history of the ledger: its one row holds a
// random identity that every Redis marker key carries, so that markers
// written for another database (a second deployment sharing a Redis
// prefix) or for a later history of this one (before a restore from
// backup, or a failover that lost events) never answer for it. `hookledger
// redis forget` renews it. The row also holds the deployment's fingerprint
// key, which nothing renews.
type LedgerIdentity struct {
	ent.Schema
}

// Annotations names the table.
func (LedgerIdentity) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("ledger_identity")}
}

// Fields of the identity row.
func (LedgerIdentity) Fields() []ent.Field {
	return []ent.Field{
		field.Int("id").Comment("Always 1: the table holds one row."),
		field.String("identity").NotEmpty(),
		field.Time("renewed_at").Default(time.Now).
			Annotations(entsql.Default("CURRENT_TIMESTAMP")),
		// fingerprint_key keys the secret fingerprints
		// (provider.SecretFingerprint): 32 random bytes the first process
		// to start writes (ledger.FingerprintKey), never renewed, so
		// fingerprints stay the same across restarts and rotations while
		// one seen without the database cannot be tested against guessed
		// secrets. Written at start rather than by the migration, so a
		// database made from a migrated template gets its own.
		field.Bytes("fingerprint_key").Sensitive().Optional().Nillable(),
	}
}
