-- Per fairness key ready counts for /metrics and the dashboard
-- (docs/priority-and-fairness.md §5): fair_pick is pick_state for tasks with
-- a fairness key and NULL otherwise, so its index holds each key's READY
-- tasks together and the entry of a task without a key never moves.
ALTER TABLE tasks
    ADD COLUMN fair_pick VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin
        AS (CASE WHEN fairness_key IS NOT NULL AND state = 'READY' THEN 'READY' END) STORED AFTER fairness_key,
    ADD KEY tasks_fair_pick (queue, fair_pick, fairness_key);
