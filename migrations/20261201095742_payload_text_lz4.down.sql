-- reverse: modify "webhook_event" table
ALTER TABLE "webhook_event" ALTER COLUMN "payload" TYPE jsonb USING "payload"::jsonb, ALTER COLUMN "payload" SET COMPRESSION default;
