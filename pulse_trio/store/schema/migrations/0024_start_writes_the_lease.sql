-- A start writes its lease alone: the task row stays OFFERED while its lease
-- lives, started or not, and keeps the attempt number of its last ended
-- attempt (the lease carries the running one). Readers show a held task as
-- OFFERED or RUNNING, at the lease's attempt, from its live lease; a finish
-- or an expiry moves the row on from OFFERED and takes the lease's attempt.
-- Rows an older version started are put where this one would have left them.
-- An instance of an older version still running would start tasks the old
-- way again: stop them all before this migration (docs/operations.md §1.3).
UPDATE tasks SET state = 'OFFERED', attempt = attempt - 1 WHERE state = 'RUNNING';
