-- modify "webhook_event" table: the payload is kept as the delivered text,
-- byte for byte, compressed with lz4 (docs/BENCHMARKS.md). Rows written
-- before keep the text of their jsonb value.
ALTER TABLE "webhook_event" ALTER COLUMN "payload" TYPE text, ALTER COLUMN "payload" SET COMPRESSION lz4;
