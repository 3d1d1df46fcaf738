-- The carried-over states go with the table (the alert_state migration's
-- down drops it).
SELECT 1;
