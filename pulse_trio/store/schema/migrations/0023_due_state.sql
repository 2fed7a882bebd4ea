-- tasks_due held every READY and SCHEDULED task under its pick_state, so
-- each offer (READY to OFFERED) moved the task's entry although only the
-- promotion timer looks tasks up there, and only SCHEDULED ones. due_state
-- is the state while the task waits to be promoted (SCHEDULED) and NULL
-- otherwise: a READY task's entry is made at its submit and never moves, and
-- an offer moves two index entries instead of three. The queue-depth counts
-- that read READY and SCHEDULED through tasks_due now read them through
-- tasks_pickup, which holds pick_state after the queue (an index-only read
-- of the waiting tasks, queue by queue).
ALTER TABLE tasks
    ADD COLUMN due_state VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin
        AS (CASE WHEN state = 'SCHEDULED' THEN state END) STORED AFTER pick_state,
    DROP KEY tasks_due,
    ADD KEY tasks_due (due_state, due_at);
