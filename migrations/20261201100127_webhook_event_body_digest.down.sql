-- reverse: create index "webhookevent_body_digest" to table: "webhook_event"
DROP INDEX "webhookevent_body_digest";
-- reverse: modify "webhook_event" table
ALTER TABLE "webhook_event" DROP COLUMN "body_digest";
