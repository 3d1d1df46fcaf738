-- Apply jobs carry River's whole retry policy in their attempts (84, about
-- 72 hours of backoff); jobs inserted before that carried a budget that
-- only crashes spent. Give the unfinished ones the policy's budget.
UPDATE river_job SET max_attempts = GREATEST(attempt + 1, 84)
WHERE kind IN ('apply_event', 'apply_batch') AND max_attempts > 84 AND finalized_at IS NULL;
