-- A hello may subscribe to 64 queues of 64 kinds each, with names of 64
-- characters: about 290 KB of subscriptions, within the 512 KiB frame. TEXT
-- holds 64 KiB, so such a hello failed in the store, and its worker, told to
-- retry later, retried forever. MEDIUMTEXT holds 16 MiB.
ALTER TABLE worker_instances
    MODIFY COLUMN subscriptions MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
