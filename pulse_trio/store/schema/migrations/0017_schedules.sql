-- Recurring schedules (chart `schedule`; docs/operations.md §8). Each due tick
-- becomes one task: the fire transaction locks the row (FOR UPDATE SKIP LOCKED,
-- so serve processes never wait on each other), inserts the tick's task with
-- the idempotency key `schedule:<schedule_id>:<tick>` (unique per queue by
-- tasks_dedup) and moves next_fire_at past now, all in one commit.
CREATE TABLE schedules (
    schedule_id     CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    name            VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    state           VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- the name while the schedule is not DELETED: live names are unique, a
    -- deleted schedule's name is free again
    live_name       VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin
        AS (CASE WHEN state <> 'DELETED' THEN name END) STORED,
    queue           VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    kind            VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    payload         MEDIUMTEXT   NOT NULL,
    priority        TINYINT UNSIGNED NOT NULL DEFAULT 0,
    max_attempts    INT UNSIGNED NOT NULL DEFAULT 3,
    -- exactly one of cron (five fields) and interval_s
    cron            VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    interval_s      INT UNSIGNED NULL,
    timezone        VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- skip / catch_up, and how many missed ticks one catch-up fires
    missed          VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    catch_up_limit  INT UNSIGNED NOT NULL DEFAULT 1,
    -- the first tick not fired yet (UTC)
    next_fire_at    DATETIME(6)  NOT NULL,
    last_tick_at    DATETIME(6)  NULL,
    last_task_id    CHAR(30)     CHARACTER SET ascii COLLATE ascii_bin NULL,
    fired_ticks     BIGINT UNSIGNED NOT NULL DEFAULT 0,
    created_at      DATETIME(6)  NOT NULL,
    created_by      VARCHAR(128) NOT NULL,
    updated_at      DATETIME(6)  NOT NULL,
    updated_by      VARCHAR(128) NOT NULL,
    PRIMARY KEY (schedule_id),
    UNIQUE KEY schedules_live_name (live_name),
    -- the fire timer: ACTIVE schedules by their next tick
    KEY schedules_due (state, next_fire_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
