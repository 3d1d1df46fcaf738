-- Until alert_state, each alert's last state was its newest alert_notify
-- job: carry those over, so that an alert firing when this runs is not
-- announced again. (River keeps finished jobs for a day: an alert whose
-- last message is older has no job left, and is announced once more.)
INSERT INTO alert_state (key, name, status, level, summary, fired_at, resolved_at, updated_at)
SELECT DISTINCT ON (j.args->>'key') j.args->>'key', coalesce(j.args->>'alert', split_part(j.args->>'key', ':', 1)), j.args->>'status',
  coalesce((j.args->>'level')::bigint, 0), coalesce(j.args->>'summary', ''),
  -- A firing alert fired with the first firing message since it last
  -- resolved; a resolved one with its last firing message (as far as
  -- River kept them).
  coalesce(CASE WHEN j.args->>'status' = 'firing' THEN
      (SELECT min((f.args->>'at')::timestamptz) FROM river_job f
        WHERE f.kind = 'alert_notify' AND f.args->>'key' = j.args->>'key' AND f.args->>'status' = 'firing'
          AND f.id > coalesce((SELECT max(r.id) FROM river_job r
            WHERE r.kind = 'alert_notify' AND r.args->>'key' = j.args->>'key' AND r.args->>'status' = 'resolved'), 0))
    ELSE (SELECT max((f.args->>'at')::timestamptz) FROM river_job f
        WHERE f.kind = 'alert_notify' AND f.args->>'key' = j.args->>'key' AND f.args->>'status' = 'firing') END,
    (j.args->>'at')::timestamptz, j.created_at),
  CASE WHEN j.args->>'status' = 'resolved' THEN coalesce((j.args->>'at')::timestamptz, j.created_at) END,
  coalesce((j.args->>'at')::timestamptz, j.created_at)
FROM river_job j
WHERE j.kind = 'alert_notify' AND j.args->>'status' IN ('firing', 'resolved') AND coalesce(j.args->>'key', '') <> ''
ORDER BY j.args->>'key', j.id DESC
ON CONFLICT (key) DO NOTHING;
