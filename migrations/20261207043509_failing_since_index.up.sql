-- Failed rows by when they started failing, so that the oldest failure's
-- age (hookledger_ledger_oldest_failed_seconds, read at every scrape) is
-- one index probe, not a visit to every failed row. It holds failed rows
-- only. It is built while writes to webhook_event wait (about 10 s on a
-- ledger of 10,000,000 rows): on a large ledger, build it CONCURRENTLY by
-- hand first, under the same name.
CREATE INDEX IF NOT EXISTS "webhookevent_failing_since" ON "webhook_event" ("failing_since") WHERE ((status)::text = 'failed'::text);
