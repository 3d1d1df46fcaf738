-- reverse: create index "replaywatermark_source" to table: "replay_watermark"
DROP INDEX "replaywatermark_source";
-- reverse: create "replay_watermark" table
DROP TABLE "replay_watermark";
