-- Worker instances (one per worker.hello, with its session), the epoch
-- counter, leases and command receipts (charts `instance` and `lease`).
-- Secrets are stored only as SHA-256 digests.
CREATE TABLE worker_instances (
    instance_id                CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    session_id                 CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    epoch                      BIGINT UNSIGNED NOT NULL,
    secret_digest              BINARY(32)   NOT NULL,
    -- ACTIVE / DRAINING / DISCONNECTED
    state                      VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    worker_name                VARCHAR(128) NOT NULL,
    -- JSON: [{"queue": q, "kinds": [k, ...] | null}, ...]
    subscriptions              TEXT         NOT NULL,
    cancellation_notifications BOOLEAN      NOT NULL,
    concurrency_keys           BOOLEAN      NOT NULL,
    client_info                TEXT         NULL,
    token_id                   VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    capacity                   INT UNSIGNED NOT NULL DEFAULT 0,
    -- last applied worker.capacity sequence; NULL until the first one
    sequence                   BIGINT UNSIGNED NULL,
    registered_at              DATETIME(6)  NOT NULL,
    updated_at                 DATETIME(6)  NOT NULL,
    disconnected_at            DATETIME(6)  NULL,
    PRIMARY KEY (instance_id),
    UNIQUE KEY worker_instances_session (session_id),
    UNIQUE KEY worker_instances_epoch (epoch),
    KEY worker_instances_state (state)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One row: the cluster-wide epoch, incremented under its row lock by every
-- registration, so epochs strictly increase in commit order.
CREATE TABLE epoch_counter (
    id         TINYINT UNSIGNED NOT NULL,
    last_epoch BIGINT UNSIGNED  NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

INSERT INTO epoch_counter (id, last_epoch) VALUES (1, 0);

CREATE TABLE leases (
    lease_id            CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    task_id             CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    secret_digest       BINARY(32)   NOT NULL,
    -- OFFERED / RUNNING / FINISHED / LAPSED / EXPIRED / REVOKED
    state               VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    revision            BIGINT UNSIGNED NOT NULL,
    -- the attempt number this lease is (task.attempt + 1 when offered)
    attempt             INT UNSIGNED NOT NULL,
    owner_instance_id   CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    owner_session_id    CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- the owner instance's epoch
    epoch               BIGINT UNSIGNED NOT NULL,
    expires_at          DATETIME(6)  NOT NULL,
    ttl_ms              INT UNSIGNED NOT NULL,
    effect_uncertain    BOOLEAN      NOT NULL,
    concurrency_token   BIGINT UNSIGNED NULL,
    cancel_requested_at DATETIME(6)  NULL,
    -- renewals never pass it; set with cancel_requested_at on a running lease
    cancel_deadline     DATETIME(6)  NULL,
    offered_at          DATETIME(6)  NOT NULL,
    started_at          DATETIME(6)  NULL,
    ended_at            DATETIME(6)  NULL,
    PRIMARY KEY (lease_id),
    -- lapse (OFFERED) and expire (RUNNING) timers, oldest deadline first
    KEY leases_due (state, expires_at),
    -- a session's active leases (capacity) and its cancel notifications
    KEY leases_owner (owner_session_id, state),
    KEY leases_task (task_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- What task.start / task.renew / task.finish committed, per lease revision:
-- a replay with the same content gets it back (duplicate=true), other
-- content at that revision is a revision_conflict.
CREATE TABLE command_receipts (
    lease_id       CHAR(30)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    revision       BIGINT UNSIGNED NOT NULL,
    command        VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    task_id        CHAR(30)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    content_digest BINARY(32)  NOT NULL,
    committed_at   DATETIME(6) NOT NULL,
    PRIMARY KEY (lease_id, revision)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
