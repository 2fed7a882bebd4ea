-- Tasks and their attempt history (docs/tasks.md §2, docs/retries.md §2, docs/task-recovery.md §3; chart `task`).
-- Identifiers, queues, kinds and states are case-sensitive ASCII; payloads and
-- results are stored as their exact JSON text (never re-encoded). Every time
-- is DATETIME(6) in UTC and comes from the caller's `now`, never from NOW().
CREATE TABLE tasks (
    task_id               CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    queue                 VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    kind                  VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    state                 VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    payload               MEDIUMTEXT   NOT NULL,
    priority              TINYINT UNSIGNED NOT NULL DEFAULT 0,
    -- priority x priority_step at submit, so a reschedule keeps the task's weight
    priority_offset_ms    BIGINT UNSIGNED NOT NULL DEFAULT 0,
    due_at                DATETIME(6)  NOT NULL,
    -- due_at - priority_offset: the pick-up order (docs/priority-and-fairness.md §2)
    effective_at          DATETIME(6)  NOT NULL,
    idempotency_key       VARCHAR(255) NOT NULL,
    -- = idempotency_key for submitted tasks; NULL for manual retries, which
    -- share their source's key without being deduplicated against it
    dedup_key             VARCHAR(255) NULL,
    concurrency_key       VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL,
    concurrency_limit     INT UNSIGNED NOT NULL DEFAULT 1,
    max_attempts          INT UNSIGNED NOT NULL DEFAULT 3,
    backoff_initial_ms    INT UNSIGNED NOT NULL DEFAULT 1000,
    backoff_factor        DOUBLE       NOT NULL DEFAULT 2,
    backoff_max_ms        INT UNSIGNED NOT NULL DEFAULT 300000,
    retry_uncertain       BOOLEAN      NOT NULL DEFAULT FALSE,
    -- NULL: the serving instance's --lease-ttl
    lease_ttl_ms          INT UNSIGNED NULL,
    -- attempts started so far (a lapsed offer is not an attempt)
    attempt               INT UNSIGNED NOT NULL DEFAULT 0,
    effect_uncertain      BOOLEAN      NOT NULL DEFAULT FALSE,
    retry_of              CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NULL,
    created_at            DATETIME(6)  NOT NULL,
    updated_at            DATETIME(6)  NOT NULL,
    finished_at           DATETIME(6)  NULL,
    outcome_status        VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    outcome_error_code    VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    outcome_error_message TEXT         NULL,
    outcome_retryable     BOOLEAN      NULL,
    outcome_uncertain     BOOLEAN      NULL,
    -- the attempt whose result is the outcome's (NULL: no finish, e.g. cancelled before start)
    outcome_attempt       INT UNSIGNED NULL,
    PRIMARY KEY (task_id),
    -- pick-up: equality on queue and state, then exactly the ORDER BY
    -- (effective_at, task_id), so FOR UPDATE SKIP LOCKED reads and locks only
    -- the rows it returns (no filesort)
    KEY tasks_pickup (queue, state, effective_at, task_id),
    -- promote timer: SCHEDULED tasks by due_at
    KEY tasks_due (state, due_at),
    UNIQUE KEY tasks_dedup (queue, dedup_key),
    -- one manual retry per source (idempotent retry)
    UNIQUE KEY tasks_retry_of (retry_of)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- One row per ended attempt (a lapsed offer is not an attempt).
CREATE TABLE task_attempts (
    task_id           CHAR(30)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    attempt           INT UNSIGNED NOT NULL,
    lease_id          CHAR(30)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    instance_id       CHAR(30)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    session_id        CHAR(30)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    effect_uncertain  BOOLEAN     NOT NULL,
    concurrency_token BIGINT UNSIGNED NULL,
    started_at        DATETIME(6) NOT NULL,
    ended_at          DATETIME(6) NULL,
    -- SUCCEEDED / FAILED / UNKNOWN / CANCELLED (finish) or EXPIRED; written when the
    -- attempt ends (the running attempt is its RUNNING lease)
    status            VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    error_code        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    error_message     TEXT        NULL,
    retryable         BOOLEAN     NULL,
    result            MEDIUMTEXT  NULL,
    PRIMARY KEY (task_id, attempt)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
