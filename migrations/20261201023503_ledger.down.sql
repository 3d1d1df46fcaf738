-- reverse: create index "webhookevent_received_at" to table: "webhook_event"
DROP INDEX "webhookevent_received_at";
-- reverse: create index "webhookevent_pending" to table: "webhook_event"
DROP INDEX "webhookevent_pending";
-- reverse: create index "webhookevent_namespace_event_id" to table: "webhook_event"
DROP INDEX "webhookevent_namespace_event_id";
-- reverse: create "webhook_event" table
DROP TABLE "webhook_event";
-- reverse: create index "subscription_provider_external_id" to table: "subscription"
DROP INDEX "subscription_provider_external_id";
-- reverse: create "subscription" table
DROP TABLE "subscription";
