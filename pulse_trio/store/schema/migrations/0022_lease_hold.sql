-- leases_owner held each lease under its state, so a start (OFFERED to
-- RUNNING) moved its entry although the lease stays held by the same session:
-- one secondary index entry deleted and inserted per task, for a distinction
-- no question of this index needs. hold says only what the questions ask:
-- LIVE while the lease holds its task (OFFERED, RUNNING), REVOKED for an
-- offer revoked by a cancel (a cancel push may still be due to it), NULL once
-- it ended otherwise. The entry now moves when the lease ends or is revoked,
-- never at its start.
ALTER TABLE leases
    ADD COLUMN hold VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin
        AS (CASE WHEN state IN ('OFFERED', 'RUNNING') THEN 'LIVE' WHEN state = 'REVOKED' THEN 'REVOKED' END) STORED
        AFTER state,
    DROP KEY leases_owner,
    ADD KEY leases_owner (owner_session_id, hold, cancel_requested_at);
