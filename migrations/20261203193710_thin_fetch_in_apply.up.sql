-- Thin events fetch their object within their own apply now: the fetch's
-- outcome is the event's. A thin event whose earlier stripe_thin_fetch job
-- gave up (a refused key, Stripe down for hours) was left settled with
-- nothing applied: it becomes failed with the reason, in the backlog, for
-- a requeue. One whose fetch job still waits goes back to claimed, its job
-- turned into the event's apply job.
UPDATE webhook_event e
SET status = 'failed', settled_at = NULL,
  last_error = 'thin.apply: the fetch of its object ended ' || j.state || ' before this upgrade: '
    || COALESCE(j.errors[cardinality(j.errors)]->>'error', 'no reason recorded') || '; requeue it'
FROM river_job j
WHERE j.kind = 'stripe_thin_fetch' AND j.state IN ('cancelled', 'discarded')
  AND e.namespace = j.args->>'namespace' AND e.event_id = j.args->>'event_id' AND e.status = 'settled';
UPDATE webhook_event e
SET status = 'claimed', settled_at = NULL
FROM river_job j
WHERE j.kind = 'stripe_thin_fetch' AND j.state IN ('available', 'scheduled', 'retryable', 'pending')
  AND e.namespace = j.args->>'namespace' AND e.event_id = j.args->>'event_id' AND e.status = 'settled';
UPDATE river_job
SET kind = 'apply_event', max_attempts = GREATEST(attempt + 1, 84),
  args = jsonb_build_object('namespace', args->>'namespace', 'event_id', args->>'event_id')
WHERE kind = 'stripe_thin_fetch' AND state IN ('available', 'scheduled', 'retryable', 'pending');
