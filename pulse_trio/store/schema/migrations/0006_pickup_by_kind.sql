-- Pick-up for subscriptions that name their kinds: READY tasks of other kinds
-- in the same queue are never scanned (a backlog of 100 000 tasks of another
-- kind made every claim read all of them through tasks_pickup).
ALTER TABLE tasks ADD KEY tasks_pickup_kind (queue, state, kind, effective_at, task_id);
