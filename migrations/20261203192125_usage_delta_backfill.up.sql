-- usage_delta came after usage events were already applied: without their
-- deltas, a forced re-apply (or a log-only duplicate) of one of them would
-- add its quantity to the total a second time. Record what each settled
-- usage.recorded event added, read from its payload as the usage module
-- reads it; an event whose payload the module refuses added nothing.
INSERT INTO usage_delta (namespace, event_id, customer_id, metric, quantity, applied_at)
SELECT e.namespace, e.event_id, p.doc->'data'->>'customer_id', p.doc->'data'->>'metric',
  (p.doc->'data'->>'quantity')::bigint, COALESCE(e.settled_at, CURRENT_TIMESTAMP)
FROM webhook_event e
CROSS JOIN LATERAL (SELECT e.payload::jsonb AS doc) p
WHERE e.provider = 'standard' AND e.event_type = 'usage.recorded' AND e.status = 'settled'
  AND jsonb_typeof(p.doc->'data') = 'object'
  AND COALESCE(p.doc->'data'->>'customer_id', '') <> '' AND COALESCE(p.doc->'data'->>'metric', '') <> ''
  AND jsonb_typeof(p.doc->'data'->'quantity') = 'number' AND (p.doc->'data'->>'quantity') ~ '^-?[0-9]{1,18}$'
ON CONFLICT (namespace, event_id) DO NOTHING;
