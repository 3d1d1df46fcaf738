-- An apply absorbs the claims' jobs that wait beside it (absorbed by the
-- job a worker starts, in its transaction): this index holds those jobs
-- only, in River's fetch order, so that finding them reads no job it
-- cannot absorb, however many wait (a bulk requeue's). It is built while
-- writes to river_job wait; on a large table, build it CONCURRENTLY by hand
-- first, under the same name.
CREATE INDEX IF NOT EXISTS "river_job_absorbable" ON "river_job" ("queue", "priority", "scheduled_at", "id")
  WHERE state = 'available' AND attempted_at IS NULL
    AND (kind = 'apply_batch' OR (kind = 'apply_event' AND args @> '{"fresh": true}'));
