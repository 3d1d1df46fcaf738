-- The backfilled deltas stay: they are what the events added.
SELECT 1;
