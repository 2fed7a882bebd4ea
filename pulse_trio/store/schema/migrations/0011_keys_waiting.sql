-- No head-of-line blocking at any depth (docs/keyed-concurrency.md §3): a
-- READY task whose key is at its limit is set aside (task.wait_for_key) so
-- that no later claim reads it again, and is put back (task.key_freed) when a
-- permit of its key is released. pick_state shows it as KEY_WAIT, so the
-- pick-up indexes hold it outside the READY range every claim reads; it is
-- still READY to everyone else (views, cancel, counts).
--
-- key_pick is pick_state for keyed READY tasks and NULL otherwise: the index
-- over it finds a key's READY tasks to set aside, and its waiting ones in
-- pick-up order to put back, without an entry that moves for unkeyed tasks.
ALTER TABLE tasks
    ADD COLUMN waits_for_key BOOLEAN NOT NULL DEFAULT FALSE AFTER concurrency_limit,
    MODIFY COLUMN pick_state VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin
        AS (CASE WHEN state = 'READY' AND waits_for_key THEN 'KEY_WAIT'
                 WHEN state IN ('READY', 'SCHEDULED') THEN state END) STORED,
    ADD COLUMN key_pick VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin
        AS (CASE WHEN state = 'READY' AND concurrency_key IS NOT NULL
                 THEN IF(waits_for_key, 'KEY_WAIT', 'READY') END) STORED AFTER waits_for_key,
    ADD KEY tasks_key_pick (concurrency_key, key_pick, effective_at, task_id);
