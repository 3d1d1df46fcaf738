-- reverse: create index "deliverystat_minute_source_outcome" to table: "delivery_stat"
DROP INDEX "deliverystat_minute_source_outcome";
-- reverse: create "delivery_stat" table
DROP TABLE "delivery_stat";
