-- Retention of finished work (docs/operations.md §10): the cluster setting
-- task_retention, seeded with the code's default (7 days, in ms). A queue's
-- own retention is `queues.task_retention_ms` (migration 0015). The purge
-- reads terminal tasks through tasks_finished (queue, outcome_status,
-- finished_at), an index every ended task is in already: no new index, so a
-- task's hot path writes nothing more.
INSERT INTO cluster_settings (name, value_ms, state) VALUES ('task_retention', 604800000, 'DEFAULT');
