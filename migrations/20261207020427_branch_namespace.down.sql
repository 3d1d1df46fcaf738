-- reverse: create index "githubbranch_namespace_repository_ref" to table: "github_branch"
DROP INDEX "githubbranch_namespace_repository_ref";
-- reverse: drop index "githubbranch_repository_ref": one head per
-- repository and ref again, the newest push's of all namespaces
DELETE FROM "github_branch" AS a USING "github_branch" AS b
WHERE a."repository" = b."repository" AND a."ref" = b."ref" AND (a."pushed_at", a."id") < (b."pushed_at", b."id");
CREATE UNIQUE INDEX "githubbranch_repository_ref" ON "github_branch" ("repository", "ref");
-- reverse: modify "github_branch" table
ALTER TABLE "github_branch" DROP COLUMN "namespace";
