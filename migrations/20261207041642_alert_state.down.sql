-- reverse: create index "alertstate_key" to table: "alert_state"
DROP INDEX "alertstate_key";
-- reverse: create "alert_state" table
DROP TABLE "alert_state";
