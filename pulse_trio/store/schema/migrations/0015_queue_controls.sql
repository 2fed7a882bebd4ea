-- What an operator decided about a queue (chart `queue`): paused or active,
-- and its own task retention. A queue without a row is ACTIVE and keeps the
-- cluster's task_retention; rows appear when a queue is first paused or
-- given a retention of its own, and are never deleted (a handful per queue).
-- Every serve process re-reads the PAUSED rows twice a second
-- (pulse_trio/server/queue_sync.py).
CREATE TABLE queues (
    queue             VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- ACTIVE / PAUSED
    state             VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- milliseconds a terminal task of this queue is kept; NULL: the cluster's task_retention
    task_retention_ms BIGINT UNSIGNED NULL,
    -- the pause in force (kept after a resume, for the record)
    paused_at         DATETIME(6)  NULL,
    paused_by         VARCHAR(128) NULL,
    -- the last change of any kind, and who made it: `cli@host`, `http:tok_…`
    updated_at        DATETIME(6)  NOT NULL,
    updated_by        VARCHAR(128) NOT NULL,
    PRIMARY KEY (queue),
    -- the paused set every instance re-reads: an index range, not a table scan
    KEY queues_state (state)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
