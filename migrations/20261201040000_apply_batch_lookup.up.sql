-- Finds the apply_batch job that carries an event (admin show, requeue).
CREATE INDEX IF NOT EXISTS river_job_apply_batch_events ON river_job USING gin ((args->'events') jsonb_path_ops) WHERE kind = 'apply_batch';
