-- modify "ledger_identity" table
ALTER TABLE "ledger_identity" ADD COLUMN "fingerprint_key" bytea NULL;
