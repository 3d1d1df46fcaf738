DROP INDEX IF EXISTS river_job_apply_event_key;
