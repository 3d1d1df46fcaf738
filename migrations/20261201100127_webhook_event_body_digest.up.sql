-- modify "webhook_event" table
ALTER TABLE "webhook_event" ADD COLUMN "body_digest" character varying NULL;
-- create index "webhookevent_body_digest" to table: "webhook_event"
CREATE UNIQUE INDEX "webhookevent_body_digest" ON "webhook_event" ("namespace", "body_digest") WHERE (body_digest IS NOT NULL);
