-- reverse: modify "webhook_event" table
ALTER TABLE "webhook_event" DROP COLUMN "secret_fingerprint";
