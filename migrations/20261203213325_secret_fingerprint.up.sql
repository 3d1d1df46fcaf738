-- modify "webhook_event" table
ALTER TABLE "webhook_event" ADD COLUMN "secret_fingerprint" character varying NULL;
