-- reverse: create index "invoice_namespace_provider_external_id" to table: "invoice"
DROP INDEX "invoice_namespace_provider_external_id";
-- reverse: create "invoice" table
DROP TABLE "invoice";
-- reverse: create index "entitlementsummary_namespace_provider_customer_id" to table: "entitlement_summary"
DROP INDEX "entitlementsummary_namespace_provider_customer_id";
-- reverse: create "entitlement_summary" table
DROP TABLE "entitlement_summary";
-- reverse: create index "entitlement_namespace_provider_customer_id_lookup_key" to table: "entitlement"
DROP INDEX "entitlement_namespace_provider_customer_id_lookup_key";
-- reverse: create "entitlement" table
DROP TABLE "entitlement";
