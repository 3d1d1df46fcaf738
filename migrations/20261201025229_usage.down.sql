-- reverse: create index "usagetotal_customer_id_metric" to table: "usage_total"
DROP INDEX "usagetotal_customer_id_metric";
-- reverse: create "usage_total" table
DROP TABLE "usage_total";
