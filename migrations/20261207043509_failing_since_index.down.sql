-- reverse: create index "webhookevent_failing_since" to table: "webhook_event"
DROP INDEX IF EXISTS "webhookevent_failing_since";
