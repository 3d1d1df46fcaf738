-- reverse: create "ledger_identity" table
DROP TABLE "ledger_identity";
