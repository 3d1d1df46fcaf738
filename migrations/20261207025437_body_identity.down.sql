-- reverse: modify "webhook_event" table
ALTER TABLE "webhook_event" DROP COLUMN "body_identity";
