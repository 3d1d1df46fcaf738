-- modify "webhook_event" table
ALTER TABLE "webhook_event" ADD COLUMN "body_identity" character varying NULL;
