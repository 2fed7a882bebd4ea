-- Per fairness key READY counts (/metrics, the dashboard; docs/priority-and-fairness.md §5)
-- read tasks_pickup instead of an index of their own. tasks_fair_pick
-- (queue, fair_pick, fairness_key) changed on every offer of a task with a
-- key (fair_pick went from READY to NULL): one more secondary index entry
-- moved per keyed task than per unkeyed one. tasks_pickup changes at the
-- offer for every task anyway (pick_state leaves READY), so fairness_key,
-- put after its key columns, rides along in the same entry: the counts stay
-- an index-only read of the READY ranges, and a keyed task moves no more
-- index entries than an unkeyed one. The claim's order and reads are as
-- before: task_id is unique, so the column after it orders nothing.
ALTER TABLE tasks
    DROP KEY tasks_fair_pick,
    DROP COLUMN fair_pick,
    DROP KEY tasks_pickup,
    ADD KEY tasks_pickup (queue, pick_state, effective_at, task_id, fairness_key);
