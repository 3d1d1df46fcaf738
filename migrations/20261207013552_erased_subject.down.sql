-- reverse: create index "erasedsubject_namespace_digest" to table: "erased_subject"
DROP INDEX "erasedsubject_namespace_digest";
-- reverse: create "erased_subject" table
DROP TABLE "erased_subject";
