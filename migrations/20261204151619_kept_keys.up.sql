-- modify "webhook_event" table
ALTER TABLE "webhook_event" ADD COLUMN "erased_at" timestamptz NULL;
-- create "webhook_key" table
CREATE TABLE "webhook_key" ("key_hash" bytea NOT NULL, "received_on" date NOT NULL, PRIMARY KEY ("key_hash"));
-- create index "webhookkey_received_on" to table: "webhook_key"
CREATE INDEX "webhookkey_received_on" ON "webhook_key" USING brin ("received_on");

-- The console reads which secret verified each source's claims from
-- delivery_stat tallies ("secret:<index>:<fingerprint>", counted by every
-- receiver with its other counts), no longer from a day of ledger rows.
-- Tally the last day's rows, so that the overview's day of secret use is
-- whole from the upgrade on; a minute some receiver tallied already is
-- left as it is, never counted twice.
INSERT INTO delivery_stat (minute, source, outcome, count)
SELECT date_trunc('minute', received_at), source, 'secret:' || secret_index || ':' || COALESCE(secret_fingerprint, ''), count(*)
FROM webhook_event
WHERE received_at >= CURRENT_TIMESTAMP - interval '1 day' AND secret_index IS NOT NULL
GROUP BY 1, 2, 3
ON CONFLICT (minute, source, outcome) DO NOTHING;
