-- Cancel intents (chart `cancellation`) and keyed-concurrency permits with
-- their per-key counters (chart `key_permit`).
CREATE TABLE cancel_intents (
    task_id             CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- REQUESTED / NOTIFIED / RESOLVED / ESCALATED
    state               VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    requested_at        DATETIME(6)  NOT NULL,
    -- requested_at + cancel_grace, fixed when saved so every instance agrees
    grace_expires_at    DATETIME(6)  NULL,
    reason              VARCHAR(255) NOT NULL DEFAULT '',
    requested_by        VARCHAR(128) NOT NULL DEFAULT '',
    -- the task's state when the request was saved
    task_state          VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    lease_id            CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NULL,
    notified_session_id CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NULL,
    notified_at         DATETIME(6)  NULL,
    resolved_at         DATETIME(6)  NULL,
    PRIMARY KEY (task_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One row per concurrency key: the last fencing token handed out (strictly
-- increasing) and how many permits are HELD or QUARANTINED right now.
CREATE TABLE key_counters (
    concurrency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    last_token      BIGINT UNSIGNED NOT NULL DEFAULT 0,
    outstanding     INT UNSIGNED    NOT NULL DEFAULT 0,
    PRIMARY KEY (concurrency_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE key_permits (
    lease_id          CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    concurrency_key   VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    concurrency_token BIGINT UNSIGNED NOT NULL,
    task_id           CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- HELD / RELEASED / QUARANTINED
    state             VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    acquired_at       DATETIME(6)  NOT NULL,
    quarantine_until  DATETIME(6)  NULL,
    released_at       DATETIME(6)  NULL,
    PRIMARY KEY (lease_id),
    UNIQUE KEY key_permits_token (concurrency_key, concurrency_token),
    -- quarantine timer
    KEY key_permits_due (state, quarantine_until)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
