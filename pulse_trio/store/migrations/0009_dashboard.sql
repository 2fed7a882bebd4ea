-- The dashboard's recent activity: finishes per queue and outcome over the last
-- hour. finished_at and outcome_status are NULL until a task ends and are set
-- once, in the same UPDATE, so this index changes at insert (one entry) and at
-- the terminal transition (the entry moves), never on READY/OFFERED/RUNNING.
-- queue and outcome_status make it covering: the per-minute counts read only
-- this index, in finished_at order, for the window asked.
ALTER TABLE tasks ADD KEY tasks_finished (finished_at, queue, outcome_status);
