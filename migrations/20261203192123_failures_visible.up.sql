-- modify "webhook_event" table
ALTER TABLE "webhook_event" ADD COLUMN "handlers" jsonb NULL, ADD COLUMN "failure_log" jsonb NULL, ADD COLUMN "discard_reason" character varying NULL;
-- create index "webhookevent_discarded" to table: "webhook_event"
CREATE INDEX "webhookevent_discarded" ON "webhook_event" ("received_at") WHERE ((status)::text = 'discarded'::text);
