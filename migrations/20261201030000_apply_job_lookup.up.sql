-- Finds an event's apply job (admin show, requeue) without scanning river_job.
CREATE INDEX IF NOT EXISTS river_job_apply_event_key ON river_job ((args->>'namespace'), (args->>'event_id')) WHERE kind = 'apply_event';
