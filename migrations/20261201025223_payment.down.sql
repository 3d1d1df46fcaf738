-- reverse: create index "payment_provider_external_id" to table: "payment"
DROP INDEX "payment_provider_external_id";
-- reverse: create "payment" table
DROP TABLE "payment";
