-- reverse: create index "webhookkey_received_on" to table: "webhook_key"
DROP INDEX "webhookkey_received_on";
-- reverse: create "webhook_key" table
DROP TABLE "webhook_key";
-- reverse: modify "webhook_event" table
ALTER TABLE "webhook_event" DROP COLUMN "erased_at";
