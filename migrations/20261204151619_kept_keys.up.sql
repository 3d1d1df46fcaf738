-- modify "webhook_event" table
ALTER TABLE "webhook_event" ADD COLUMN "erased_at" timestamptz NULL;
-- create "webhook_key" table
CREATE TABLE "webhook_key" ("key_hash" bytea NOT NULL, "received_on" date NOT NULL, PRIMARY KEY ("key_hash"));
-- create index "webhookkey_received_on" to table: "webhook_key"
CREATE INDEX "webhookkey_received_on" ON "webhook_key" USING brin ("received_on");
