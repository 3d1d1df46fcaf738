package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// ErasedSubject is the record of a subject `hookledger erase` erased:
// its SHA-256 digest, never the value, per namespace (empty: every
// namespace). Drift, the subscription re-fetch, replay and the module
// writes look a value up here before they write it, so an erased
// subject is not written back from the provider's copy.
type ErasedSubject struct {
	ent.Schema
}

// Annotations names the table.
func (ErasedSubject) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("erased_subject")}
}

// Fields of an erased subject.
func (ErasedSubject) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("namespace").Immutable().
			Comment("The ledger namespace it was erased in; empty when erased in every namespace."),
		field.Bytes("digest").Immutable().
			Comment("SHA-256 of the subject's UTF-8 bytes (ledger.SubjectDigest)."),
		field.Time("erased_at").Default(time.Now).
			Annotations(entsql.Default("CURRENT_TIMESTAMP")).
			Comment("When it was last erased."),
	}
}

// Indexes of erased subjects.
func (ErasedSubject) Indexes() []ent.Index {
	return []ent.Index{index.Fields("namespace", "digest").Unique()}
}
