-- A released permit brought back the key's first waiting tasks in pick-up
-- order, wherever they were: in a paused queue, a queue no session takes or a
-- kind no session names, nobody was offered them, while the key's tasks that
-- a worker would take stayed set aside with no permit of the key out
-- (docs/keyed-concurrency.md §3). A release now brings tasks back in each
-- queue and kind where the key waits: with the queue and kind after key_pick,
-- the index goes from one such place to the next in one read, and gives each
-- place's waiting tasks in pick-up order. It rebuilds tasks_key_pick.
ALTER TABLE tasks
    DROP KEY tasks_key_pick,
    ADD KEY tasks_key_pick (concurrency_key, key_pick, queue, kind, effective_at, task_id);
-- The set-aside tasks of a key with no permit out, which no release would
-- bring back, compete again (a claim that meets the key at its limit sets
-- them aside anew).
UPDATE tasks FORCE INDEX (tasks_key_pick) SET waits_for_key = FALSE
 WHERE concurrency_key IS NOT NULL AND key_pick = 'KEY_WAIT'
   AND concurrency_key NOT IN (SELECT concurrency_key FROM key_counters WHERE outstanding > 0);
