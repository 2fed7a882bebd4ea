-- Weighted fairness keys (docs/priority-and-fairness.md §5; chart `fair_share`).
--
-- A task may name a fairness_key (a tenant, say). Each (queue, fairness_key)
-- has a virtual clock; a task of the key that becomes READY is placed at
-- max(due_at, clock) - priority offset, and the clock moves on by
-- fairness_quantum / weight. effective_at holds that placement, so the
-- pick-up order, its indexes and the claim are the ones there were: a key
-- with much work waiting has it spread out, a key with little is not held
-- back by it. Tasks without a key are placed at due_at as before.
ALTER TABLE tasks
    ADD COLUMN fairness_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL AFTER concurrency_limit;

CREATE TABLE fair_shares (
    -- "<queue> <fairness_key>" (a queue name holds no space): move()'s one key column
    share_id     VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    queue        VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    fairness_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- ACTIVE
    state        VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- where the key's next READY task is placed at the earliest
    virtual_at   DATETIME(6)  NOT NULL,
    -- tasks of the key placed in this queue so far
    placed       BIGINT UNSIGNED NOT NULL DEFAULT 0,
    updated_at   DATETIME(6)  NOT NULL,
    PRIMARY KEY (share_id),
    UNIQUE KEY fair_shares_key (queue, fairness_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- A key's weight, cluster-wide (every queue; chart `fairness_weight`); a key
-- without a row weighs 1. Changed at run time (`pulse-trio settings weight`,
-- PUT /v1/settings/fairness-weights/{key}); applies to tasks placed after it.
CREATE TABLE fairness_weights (
    fairness_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- SET
    state        VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    weight       INT UNSIGNED NOT NULL,
    updated_at   DATETIME(6)  NOT NULL,
    updated_by   VARCHAR(128) NULL,
    PRIMARY KEY (fairness_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The default of pulse_trio/cluster_settings.py (a test keeps the two equal).
INSERT INTO cluster_settings (name, value_ms, state) VALUES ('fairness_quantum', 1000, 'DEFAULT');
