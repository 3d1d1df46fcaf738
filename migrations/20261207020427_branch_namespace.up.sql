-- modify "github_branch" table: each existing head takes the namespace the
-- ledger holds its push under (the github source's, "github", when the
-- push was pruned)
ALTER TABLE "github_branch" ADD COLUMN "namespace" character varying NOT NULL DEFAULT 'github';
UPDATE "github_branch" AS b SET "namespace" = e."namespace" FROM "webhook_event" AS e
WHERE e."provider" = 'github' AND e."event_id" = b."delivery_id";
ALTER TABLE "github_branch" ALTER COLUMN "namespace" DROP DEFAULT;
-- drop index "githubbranch_repository_ref" from table: "github_branch"
DROP INDEX "githubbranch_repository_ref";
-- create index "githubbranch_namespace_repository_ref" to table: "github_branch"
CREATE UNIQUE INDEX "githubbranch_namespace_repository_ref" ON "github_branch" ("namespace", "repository", "ref");
