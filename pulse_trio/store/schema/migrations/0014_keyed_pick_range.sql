-- A session that did not declare concurrency_keys takes only unkeyed tasks,
-- and found them by walking every READY keyed task ahead of them (the filter
-- concurrency_key IS NULL is not in the index): a backlog of keyed tasks that
-- no keyed worker takes made each of its claims read all of them
-- (docs/keyed-concurrency.md §3). pick_state now holds a READY keyed task
-- under KEYED: READY is exactly the unkeyed ones, and each session reads the
-- ranges it may take, in the same indexes.
ALTER TABLE tasks
    MODIFY COLUMN pick_state VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin
        AS (CASE WHEN state = 'READY' AND waits_for_key THEN 'KEY_WAIT'
                 WHEN state = 'READY' AND concurrency_key IS NOT NULL THEN 'KEYED'
                 WHEN state IN ('READY', 'SCHEDULED') THEN state END) STORED;
