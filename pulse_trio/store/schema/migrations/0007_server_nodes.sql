-- Server-process liveness as data (chart `node`): one row per `pulse-trio
-- serve` process, and the node that holds each session. A process that dies
-- without closing its sessions (SIGKILL, a lost host) stops heartbeating;
-- once its expires_at passes, another instance declares it LOST and
-- disconnects its sessions, so operators see no ghost sessions.
CREATE TABLE server_nodes (
    node_id      CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- ALIVE / LOST / STOPPED
    state        VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- for operators: where the process ran
    host         VARCHAR(255) NOT NULL,
    pid          INT UNSIGNED NOT NULL,
    -- the node's own --node-lapse: a node is judged by the lapse it declared
    lapse_ms     INT UNSIGNED NOT NULL,
    started_at   DATETIME(6)  NOT NULL,
    heartbeat_at DATETIME(6)  NOT NULL,
    -- When the other nodes must look at this one: heartbeat_at + lapse_ms
    -- while ALIVE; kept on a LOST node while some of its sessions are still
    -- to be disconnected (they were locked), then NULL; NULL once STOPPED.
    expires_at   DATETIME(6)  NULL,
    -- the last time another node declared it lost, and which node did
    lost_at      DATETIME(6)  NULL,
    lost_by      CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NULL,
    stopped_at   DATETIME(6)  NULL,
    PRIMARY KEY (node_id),
    -- the sweep every instance runs each tick: lapsed ALIVE nodes, and LOST
    -- ones with sessions left; NULL expires_at (nothing to do) is outside the range
    KEY server_nodes_due (state, expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The serve process holding the session; NULL for sessions registered
-- outside one (and for rows older than this migration).
ALTER TABLE worker_instances
    ADD COLUMN node_id CHAR(30) CHARACTER SET ascii COLLATE ascii_bin NULL AFTER token_id,
    ADD KEY worker_instances_node (node_id, state);
