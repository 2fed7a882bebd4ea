-- A claim that took a keyed task and, later in the same scan, met the task's
-- key at its limit set that task aside too (a claim's own lock does not skip
-- it), and the offer kept the mark. After a retry or a lapse such a task came
-- back READY but set aside (KEY_WAIT) with no release owed to it: unless
-- another permit of its key was out, nothing ever offered it again. Claims no
-- longer do that (docs/keyed-concurrency.md §3).
-- Here the marks tasks carry outside READY are dropped, and the set-aside
-- tasks of a key with no permit out, which no release would bring back,
-- compete again (a claim that meets the key at its limit sets them aside anew).
UPDATE tasks FORCE INDEX (tasks_key_pick) SET waits_for_key = FALSE
 WHERE concurrency_key IS NOT NULL AND waits_for_key AND state <> 'READY';
UPDATE tasks FORCE INDEX (tasks_key_pick) SET waits_for_key = FALSE
 WHERE concurrency_key IS NOT NULL AND key_pick = 'KEY_WAIT'
   AND concurrency_key NOT IN (SELECT concurrency_key FROM key_counters WHERE outstanding > 0);
