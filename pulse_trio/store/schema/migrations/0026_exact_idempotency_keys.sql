-- An idempotency key is compared exactly: "inv-1" and "inv-1 " are two keys.
-- utf8mb4_bin is a PAD SPACE collation (MariaDB compares its values as if
-- trailing spaces were absent), so tasks_dedup took two such keys for one and
-- a submit answered with the other key's task, and a listing by key found it.
-- NO PAD makes every character count. The ids, names and keys of other
-- columns cannot end in a space (their grammars), so only these two change.
-- It rebuilds tasks_dedup (docs/operations.md §1.3).
ALTER TABLE tasks
    MODIFY COLUMN idempotency_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    MODIFY COLUMN dedup_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NULL;
