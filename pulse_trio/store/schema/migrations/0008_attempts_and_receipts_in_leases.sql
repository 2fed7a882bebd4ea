-- A started lease IS the attempt, and the receipts of its start and finish are
-- facts about the lease: they move into the lease row, so a task's hot path
-- writes no attempt row and no receipt rows (docs/storage.md).
--
-- * the start receipt: the revision task.start carried (start_revision); its
--   commit time is started_at, and its content is fixed by the lease itself;
-- * the finish receipt: revision - 1 of a FINISHED lease, committed at
--   ended_at, with the digest of the reported outcome (finish_digest; the
--   lease and revision are the row's own, so they need not be in it);
-- * the attempt's outcome: status (SUCCEEDED / FAILED / UNKNOWN / CANCELLED
--   from a finish, EXPIRED from the timer), error_code, error_message,
--   retryable and the exact result text;
-- * renewals keep a row per receipt, in renew_receipts.
--
-- task_attempts and command_receipts stay readable, as views with the
-- columns they had.
ALTER TABLE leases
    ADD COLUMN start_revision BIGINT UNSIGNED NULL AFTER ended_at,
    ADD COLUMN finish_digest  BINARY(32)      NULL AFTER start_revision,
    ADD COLUMN status         VARCHAR(16)     CHARACTER SET ascii COLLATE ascii_bin NULL AFTER finish_digest,
    ADD COLUMN error_code     VARCHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NULL AFTER status,
    ADD COLUMN error_message  TEXT            NULL AFTER error_code,
    ADD COLUMN retryable      BOOLEAN         NULL AFTER error_message,
    ADD COLUMN result         MEDIUMTEXT      NULL AFTER retryable;

UPDATE leases l JOIN task_attempts a ON a.lease_id = l.lease_id
   SET l.status = a.status, l.error_code = a.error_code, l.error_message = a.error_message,
       l.retryable = a.retryable, l.result = a.result;
UPDATE leases l JOIN command_receipts r ON r.lease_id = l.lease_id AND r.command = 'task.start'
   SET l.start_revision = r.revision;
UPDATE leases l JOIN command_receipts r ON r.lease_id = l.lease_id AND r.command = 'task.finish'
   SET l.finish_digest = r.content_digest;

DROP TABLE task_attempts;
RENAME TABLE command_receipts TO renew_receipts;
DELETE FROM renew_receipts WHERE command <> 'task.renew';

-- One row per ended attempt, as before.
CREATE VIEW task_attempts AS
SELECT task_id, attempt, lease_id, owner_instance_id AS instance_id, owner_session_id AS session_id,
       effect_uncertain, concurrency_token, started_at, ended_at, status, error_code, error_message,
       retryable, result
  FROM leases
 WHERE started_at IS NOT NULL AND status IS NOT NULL;

-- Every receipt, wherever it is kept (a start's content is implied by its lease).
CREATE VIEW command_receipts AS
SELECT lease_id, start_revision AS revision, 'task.start' AS command, task_id, NULL AS content_digest,
       started_at AS committed_at
  FROM leases WHERE start_revision IS NOT NULL
UNION ALL
SELECT lease_id, revision - 1, 'task.finish', task_id, finish_digest, ended_at
  FROM leases WHERE state = 'FINISHED'
UNION ALL
SELECT lease_id, revision, command, task_id, content_digest, committed_at FROM renew_receipts;
