-- The settings every process of the cluster must agree on (chart
-- `cluster_setting`; the list, units and bounds are in
-- pulse_trio/cluster_settings.py). Writers that fix a derived deadline into
-- a row (a cancel's grace, a submit's effective_at) read the value here in
-- their own transaction; every serve instance re-reads the table every few
-- seconds. One row per setting, seeded with the code's default.
CREATE TABLE cluster_settings (
    name       VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- milliseconds; NULL only where the setting allows it (permit_quarantine:
    -- the task's own lease ttl)
    value_ms   BIGINT UNSIGNED NULL,
    -- DEFAULT (as seeded, never set) / SET
    state      VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- who set it last and when: `serve:nod_…`, `cli@host`, `http:tok_…`,
    -- NULL while DEFAULT
    updated_at DATETIME(6) NULL,
    updated_by VARCHAR(128) NULL,
    PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The defaults of pulse_trio/cluster_settings.py (a test keeps the two equal).
INSERT INTO cluster_settings (name, value_ms, state) VALUES
    ('lease_ttl', 30000, 'DEFAULT'),
    ('start_timeout', 30000, 'DEFAULT'),
    ('cancel_grace', 30000, 'DEFAULT'),
    ('permit_quarantine', NULL, 'DEFAULT'),
    ('priority_step', 30000, 'DEFAULT'),
    ('node_heartbeat', 5000, 'DEFAULT'),
    ('node_lapse', 15000, 'DEFAULT');
