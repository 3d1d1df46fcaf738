package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// GitHubBranch is the branchhead module's latest pushed head of one ref of
// one repository, per ledger namespace.
type GitHubBranch struct {
	ent.Schema
}

// Annotations names the table.
func (GitHubBranch) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Table("github_branch")}
}

// Fields of a branch head.
func (GitHubBranch) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("namespace").NotEmpty().Immutable().
			Comment("The ledger namespace of the source that delivered the push: every key carries it."),
		field.String("repository").NotEmpty().Immutable().Comment("owner/name"),
		field.String("ref").NotEmpty().Immutable().Comment("refs/heads/main"),
		field.String("head_sha"),
		field.Bool("deleted").Default(false),
		field.Int64("pushed_at").Comment("repository.pushed_at of the push, Unix seconds."),
		field.String("delivery_id").Default(""),
		field.Time("updated_at").Default(time.Now).UpdateDefault(time.Now).
			Annotations(entsql.Default("CURRENT_TIMESTAMP")),
	}
}

// Indexes of branch heads: one head per namespace, repository and ref.
func (GitHubBranch) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("namespace", "repository", "ref").Unique(),
	}
}
