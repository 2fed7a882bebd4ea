-- Pick-up and promotion read only READY and SCHEDULED tasks, yet their indexes
-- held every task under its state, so each step of a task's life (offered,
-- started, finished) moved its entries in all three. pick_state is the state
-- while the task can be picked up or promoted and NULL otherwise: the indexes
-- change when a task enters or leaves READY/SCHEDULED, never while it runs.
--
-- tasks_finished answers what was counted through those indexes before: the
-- tasks that ended, by queue and outcome (an ended task's state is its
-- outcome_status), and, within each, the recent finishes in finished_at
-- order. Its entry moves once, when the task ends.
ALTER TABLE tasks
    ADD COLUMN pick_state VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin
        AS (CASE WHEN state IN ('READY', 'SCHEDULED') THEN state END) STORED AFTER state,
    DROP KEY tasks_pickup,
    DROP KEY tasks_pickup_kind,
    DROP KEY tasks_due,
    ADD KEY tasks_pickup (queue, pick_state, effective_at, task_id),
    ADD KEY tasks_pickup_kind (queue, pick_state, kind, effective_at, task_id),
    ADD KEY tasks_due (pick_state, due_at),
    ADD KEY tasks_finished (queue, outcome_status, finished_at);

-- The cancel pushes a tick looks for are the live (or revoked) leases of this
-- instance's sessions that carry a cancel request: an index range, not a walk
-- over every lease those sessions hold.
ALTER TABLE leases
    DROP KEY leases_owner,
    ADD KEY leases_owner (owner_session_id, state, cancel_requested_at);
