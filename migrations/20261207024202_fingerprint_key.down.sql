-- reverse: modify "ledger_identity" table
ALTER TABLE "ledger_identity" DROP COLUMN "fingerprint_key";
