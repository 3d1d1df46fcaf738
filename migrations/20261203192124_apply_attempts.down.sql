-- The earlier budget, for the unfinished apply jobs.
UPDATE river_job SET max_attempts = 32000
WHERE kind IN ('apply_event', 'apply_batch') AND finalized_at IS NULL;
