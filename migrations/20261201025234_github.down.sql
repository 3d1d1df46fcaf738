-- reverse: create index "githubbranch_repository_ref" to table: "github_branch"
DROP INDEX "githubbranch_repository_ref";
-- reverse: create "github_branch" table
DROP TABLE "github_branch";
