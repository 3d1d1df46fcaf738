-- reverse: create index "webhookevent_discarded" to table: "webhook_event"
DROP INDEX "webhookevent_discarded";
-- reverse: modify "webhook_event" table
ALTER TABLE "webhook_event" DROP COLUMN "discard_reason", DROP COLUMN "failure_log", DROP COLUMN "handlers";
