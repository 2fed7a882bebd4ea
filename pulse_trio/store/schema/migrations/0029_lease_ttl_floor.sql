-- The cluster's lease_ttl is refused under half a second now, as a task's own
-- is (docs/operations.md §2.1): the worker SDK renews a third of the way to
-- the expiry, so a shorter lease lapses before its renewal, and every task
-- that names no lease_ttl of its own was lost or run again. A value stored
-- before the bound existed is raised to it; what was written, and by whom,
-- stays in updated_at and updated_by.
UPDATE cluster_settings SET value_ms = 500 WHERE name = 'lease_ttl' AND value_ms < 500;
