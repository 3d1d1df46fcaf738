-- The events stay as the upgrade left them: their apply jobs apply them.
SELECT 1;
