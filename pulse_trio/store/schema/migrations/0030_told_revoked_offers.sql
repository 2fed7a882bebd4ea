-- A revoked offer was filed under hold REVOKED for good, so the timers'
-- cancel question read every offer a session ever had revoked, on every
-- tick, for as long as the session lived. The entry is there only for the
-- push to its holder: a revoked offer keeps cancel_requested_at until its
-- holder is told (cancellation.notify clears it), and is filed under
-- REVOKED only while it has it. The offers already told leave the filing
-- here: cleared first, while hold does not read the column, so the ALTER's
-- one rebuild files them right and a run cut off between the two finds
-- nothing rebuilt yet.
UPDATE leases l JOIN cancel_intents c ON c.task_id = l.task_id
    SET l.cancel_requested_at = NULL
    WHERE l.state = 'REVOKED' AND l.cancel_requested_at IS NOT NULL
      AND c.notified_session_id = l.owner_session_id;
ALTER TABLE leases
    MODIFY COLUMN hold VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin
        AS (CASE WHEN state IN ('OFFERED', 'RUNNING') THEN 'LIVE'
                 WHEN state = 'REVOKED' AND cancel_requested_at IS NOT NULL THEN 'REVOKED' END) STORED;
