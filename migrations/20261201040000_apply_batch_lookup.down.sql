DROP INDEX IF EXISTS river_job_apply_batch_events;
