-- Every table as the migrations leave it (pulse_trio/store/schema/migrations). Generated, not applied:
-- tests/foundation/test_schema_snapshot.py checks it; PULSE_WRITE_SCHEMA=1 on that test rewrites it.

CREATE TABLE `api_tokens` (
  `token_id` char(30) NOT NULL,
  `digest` binary(32) NOT NULL,
  `role` varchar(16) NOT NULL,
  `queues` longtext NOT NULL CHECK (json_valid(`queues`)),
  `allow` longtext NOT NULL DEFAULT '[]' CHECK (json_valid(`allow`)),
  `label` varchar(128) NOT NULL DEFAULT '',
  `created_at` datetime(6) NOT NULL,
  `revoked_at` datetime(6) DEFAULT NULL,
  PRIMARY KEY (`token_id`),
  UNIQUE KEY `api_tokens_digest` (`digest`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `cancel_intents` (
  `task_id` char(30) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `state` varchar(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `requested_at` datetime(6) NOT NULL,
  `grace_expires_at` datetime(6) DEFAULT NULL,
  `reason` varchar(255) NOT NULL DEFAULT '',
  `requested_by` varchar(128) NOT NULL DEFAULT '',
  `task_state` varchar(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `lease_id` char(30) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  `notified_session_id` char(30) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  `notified_at` datetime(6) DEFAULT NULL,
  `resolved_at` datetime(6) DEFAULT NULL,
  PRIMARY KEY (`task_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `cluster_settings` (
  `name` varchar(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `value_ms` bigint(20) unsigned DEFAULT NULL,
  `state` varchar(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `updated_at` datetime(6) DEFAULT NULL,
  `updated_by` varchar(128) DEFAULT NULL,
  PRIMARY KEY (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `db_writer` (
  `id` tinyint(4) NOT NULL,
  `node` varchar(255) NOT NULL,
  `chosen_at` datetime(6) NOT NULL,
  `chosen_by` varchar(128) NOT NULL,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `fairness_weights` (
  `fairness_key` varchar(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `state` varchar(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `weight` int(10) unsigned NOT NULL,
  `updated_at` datetime(6) NOT NULL,
  `updated_by` varchar(128) DEFAULT NULL,
  PRIMARY KEY (`fairness_key`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `fair_shares` (
  `share_id` varchar(200) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `queue` varchar(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `fairness_key` varchar(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `state` varchar(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `virtual_at` datetime(6) NOT NULL,
  `placed` bigint(20) unsigned NOT NULL DEFAULT 0,
  `updated_at` datetime(6) NOT NULL,
  PRIMARY KEY (`share_id`),
  UNIQUE KEY `fair_shares_key` (`queue`,`fairness_key`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `key_counters` (
  `concurrency_key` varchar(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `last_token` bigint(20) unsigned NOT NULL DEFAULT 0,
  `outstanding` int(10) unsigned NOT NULL DEFAULT 0,
  PRIMARY KEY (`concurrency_key`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `key_permits` (
  `lease_id` char(30) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `concurrency_key` varchar(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `concurrency_token` bigint(20) unsigned NOT NULL,
  `task_id` char(30) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `state` varchar(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `acquired_at` datetime(6) NOT NULL,
  `quarantine_until` datetime(6) DEFAULT NULL,
  `released_at` datetime(6) DEFAULT NULL,
  PRIMARY KEY (`lease_id`),
  UNIQUE KEY `key_permits_token` (`concurrency_key`,`concurrency_token`),
  KEY `key_permits_due` (`state`,`quarantine_until`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `leases` (
  `lease_id` char(30) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `task_id` char(30) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `secret_digest` binary(32) NOT NULL,
  `state` varchar(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `hold` varchar(8) CHARACTER SET ascii COLLATE ascii_bin GENERATED ALWAYS AS (case when `state` in ('OFFERED','RUNNING') then 'LIVE' when `state` = 'REVOKED' and `cancel_requested_at` is not null then 'REVOKED' end) STORED,
  `revision` bigint(20) unsigned NOT NULL,
  `attempt` int(10) unsigned NOT NULL,
  `owner_instance_id` char(30) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `owner_session_id` char(30) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `epoch` bigint(20) unsigned NOT NULL,
  `expires_at` datetime(6) NOT NULL,
  `ttl_ms` int(10) unsigned NOT NULL,
  `effect_uncertain` tinyint(1) NOT NULL,
  `concurrency_token` bigint(20) unsigned DEFAULT NULL,
  `cancel_requested_at` datetime(6) DEFAULT NULL,
  `cancel_deadline` datetime(6) DEFAULT NULL,
  `offered_at` datetime(6) NOT NULL,
  `started_at` datetime(6) DEFAULT NULL,
  `ended_at` datetime(6) DEFAULT NULL,
  `start_revision` bigint(20) unsigned DEFAULT NULL,
  `finish_digest` binary(32) DEFAULT NULL,
  `status` varchar(16) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  `error_code` varchar(64) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  `error_message` text DEFAULT NULL,
  `retryable` tinyint(1) DEFAULT NULL,
  `result` mediumtext DEFAULT NULL,
  PRIMARY KEY (`lease_id`),
  KEY `leases_due` (`state`,`expires_at`),
  KEY `leases_task` (`task_id`),
  KEY `leases_owner` (`owner_session_id`,`hold`,`cancel_requested_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `queues` (
  `queue` varchar(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `state` varchar(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `task_retention_ms` bigint(20) unsigned DEFAULT NULL,
  `paused_at` datetime(6) DEFAULT NULL,
  `paused_by` varchar(128) DEFAULT NULL,
  `updated_at` datetime(6) NOT NULL,
  `updated_by` varchar(128) NOT NULL,
  PRIMARY KEY (`queue`),
  KEY `queues_state` (`state`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `renew_receipts` (
  `lease_id` char(30) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `revision` bigint(20) unsigned NOT NULL,
  `command` varchar(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `task_id` char(30) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `content_digest` binary(32) NOT NULL,
  `committed_at` datetime(6) NOT NULL,
  PRIMARY KEY (`lease_id`,`revision`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `schedules` (
  `schedule_id` char(30) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `name` varchar(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `state` varchar(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `live_name` varchar(64) CHARACTER SET ascii COLLATE ascii_bin GENERATED ALWAYS AS (case when `state` <> 'DELETED' then `name` end) STORED,
  `queue` varchar(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `kind` varchar(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `payload` mediumtext NOT NULL,
  `priority` tinyint(3) unsigned NOT NULL DEFAULT 0,
  `max_attempts` int(10) unsigned NOT NULL DEFAULT 3,
  `cron` varchar(255) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  `interval_s` int(10) unsigned DEFAULT NULL,
  `timezone` varchar(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `missed` varchar(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `catch_up_limit` int(10) unsigned NOT NULL DEFAULT 1,
  `next_fire_at` datetime(6) NOT NULL,
  `last_tick_at` datetime(6) DEFAULT NULL,
  `last_task_id` char(30) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  `fired_ticks` bigint(20) unsigned NOT NULL DEFAULT 0,
  `created_at` datetime(6) NOT NULL,
  `created_by` varchar(128) NOT NULL,
  `updated_at` datetime(6) NOT NULL,
  `updated_by` varchar(128) NOT NULL,
  PRIMARY KEY (`schedule_id`),
  UNIQUE KEY `schedules_live_name` (`live_name`),
  KEY `schedules_due` (`state`,`next_fire_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `schema_lock` (
  `name` varchar(64) NOT NULL,
  `owner` varchar(128) NOT NULL,
  `expires_at` datetime(6) NOT NULL,
  PRIMARY KEY (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `schema_migrations` (
  `version` int(11) NOT NULL,
  `name` varchar(128) NOT NULL,
  `applied_at` datetime(6) NOT NULL,
  PRIMARY KEY (`version`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `server_nodes` (
  `node_id` char(30) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `state` varchar(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `host` varchar(255) NOT NULL,
  `pid` int(10) unsigned NOT NULL,
  `lapse_ms` int(10) unsigned NOT NULL,
  `started_at` datetime(6) NOT NULL,
  `heartbeat_at` datetime(6) NOT NULL,
  `expires_at` datetime(6) DEFAULT NULL,
  `lost_at` datetime(6) DEFAULT NULL,
  `lost_by` char(30) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  `stopped_at` datetime(6) DEFAULT NULL,
  PRIMARY KEY (`node_id`),
  KEY `server_nodes_due` (`state`,`expires_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `tasks` (
  `task_id` char(30) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `queue` varchar(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `kind` varchar(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `state` varchar(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `pick_state` varchar(16) CHARACTER SET ascii COLLATE ascii_bin GENERATED ALWAYS AS (case when `state` = 'READY' and `waits_for_key` <> 0 then 'KEY_WAIT' when `state` = 'READY' and `concurrency_key` is not null then 'KEYED' when `state` in ('READY','SCHEDULED') then `state` end) STORED,
  `due_state` varchar(16) CHARACTER SET ascii COLLATE ascii_bin GENERATED ALWAYS AS (case when `state` = 'SCHEDULED' then `state` end) STORED,
  `payload` mediumtext NOT NULL,
  `priority` tinyint(3) unsigned NOT NULL DEFAULT 0,
  `priority_offset_ms` bigint(20) unsigned NOT NULL DEFAULT 0,
  `due_at` datetime(6) NOT NULL,
  `effective_at` datetime(6) NOT NULL,
  `idempotency_key` varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
  `dedup_key` varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin DEFAULT NULL,
  `concurrency_key` varchar(128) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  `concurrency_limit` int(10) unsigned NOT NULL DEFAULT 1,
  `fairness_key` varchar(128) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  `waits_for_key` tinyint(1) NOT NULL DEFAULT 0,
  `key_pick` varchar(16) CHARACTER SET ascii COLLATE ascii_bin GENERATED ALWAYS AS (case when `state` = 'READY' and `concurrency_key` is not null then if(`waits_for_key`,'KEY_WAIT','READY') end) STORED,
  `max_attempts` int(10) unsigned NOT NULL DEFAULT 3,
  `backoff_initial_ms` int(10) unsigned NOT NULL DEFAULT 1000,
  `backoff_factor` double NOT NULL DEFAULT 2,
  `backoff_max_ms` int(10) unsigned NOT NULL DEFAULT 300000,
  `retry_uncertain` tinyint(1) NOT NULL DEFAULT 0,
  `lease_ttl_ms` int(10) unsigned DEFAULT NULL,
  `attempt` int(10) unsigned NOT NULL DEFAULT 0,
  `effect_uncertain` tinyint(1) NOT NULL DEFAULT 0,
  `retry_of` char(30) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  `created_at` datetime(6) NOT NULL,
  `updated_at` datetime(6) NOT NULL,
  `finished_at` datetime(6) DEFAULT NULL,
  `outcome_status` varchar(16) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  `outcome_error_code` varchar(64) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  `outcome_error_message` text DEFAULT NULL,
  `outcome_retryable` tinyint(1) DEFAULT NULL,
  `outcome_uncertain` tinyint(1) DEFAULT NULL,
  `outcome_attempt` int(10) unsigned DEFAULT NULL,
  PRIMARY KEY (`task_id`),
  UNIQUE KEY `tasks_dedup` (`queue`,`dedup_key`),
  UNIQUE KEY `tasks_retry_of` (`retry_of`),
  KEY `tasks_pickup_kind` (`queue`,`pick_state`,`kind`,`effective_at`,`task_id`),
  KEY `tasks_finished` (`queue`,`outcome_status`,`finished_at`),
  KEY `tasks_pickup` (`queue`,`pick_state`,`effective_at`,`task_id`,`fairness_key`),
  KEY `tasks_due` (`due_state`,`due_at`),
  KEY `tasks_key_pick` (`concurrency_key`,`key_pick`,`queue`,`kind`,`effective_at`,`task_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `worker_instances` (
  `instance_id` char(30) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `session_id` char(30) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `epoch` bigint(20) unsigned NOT NULL AUTO_INCREMENT,
  `secret_digest` binary(32) NOT NULL,
  `state` varchar(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `worker_name` varchar(128) NOT NULL,
  `subscriptions` mediumtext NOT NULL,
  `cancellation_notifications` tinyint(1) NOT NULL,
  `concurrency_keys` tinyint(1) NOT NULL,
  `client_info` text DEFAULT NULL,
  `token_id` varchar(64) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  `node_id` char(30) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL,
  `capacity` int(10) unsigned NOT NULL DEFAULT 0,
  `sequence` bigint(20) unsigned DEFAULT NULL,
  `operator_drained_at` datetime(6) DEFAULT NULL,
  `registered_at` datetime(6) NOT NULL,
  `updated_at` datetime(6) NOT NULL,
  `disconnected_at` datetime(6) DEFAULT NULL,
  PRIMARY KEY (`instance_id`),
  UNIQUE KEY `worker_instances_session` (`session_id`),
  UNIQUE KEY `worker_instances_epoch` (`epoch`),
  KEY `worker_instances_state` (`state`),
  KEY `worker_instances_node` (`node_id`,`state`,`cancellation_notifications`,`session_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
