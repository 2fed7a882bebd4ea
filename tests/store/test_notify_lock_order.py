"""cancellation.notify locks in the store's order (lease -> intent), so a lease batch never deadlocks with it.

notify unfiles the revoked offers it tells (a lease write) and marks their
intents. A lease batch locks a lease and then, finishing another task,
that task's intent. If notify took the intents first and the offer's lease
second, the two would wait in a circle and the batch, the hot path, would
be the deadlock's victim (docs/storage.md §3).
"""

from __future__ import annotations

import threading
import time

import pymysql

from pulse_trio.dburl import connect
from pulse_trio.store import notify_cancellations, request_cancel
from pulse_trio.store.cancellation import sql as csql
from pulse_trio.store.engine.facade import SyncStore
from pulse_trio.store.lease import sql as lsql
from sql_support import INNODB_TRX_READ_GAP_S, LOCK_WAITS


def _waiting_or_done(db_conn, t: threading.Thread, deadline_s: float = 5.0) -> None:
    """Return once the notify thread has ended or some transaction waits on a lock."""
    end = time.monotonic() + deadline_s
    while t.is_alive() and time.monotonic() < end:
        with db_conn.cursor() as cur:
            cur.execute(LOCK_WAITS)
            if cur.fetchone()[0]:
                return
        time.sleep(INNODB_TRX_READ_GAP_S)


def test_notify_does_not_deadlock_a_lease_batch_holding_a_revoked_offer(world):
    w = world.worker("q", capacity=4, notify=True)
    offered = world.offer(w)            # to be revoked, its holder not told yet
    running = world.running(w)          # running: its intent stays REQUESTED
    world.run(request_cancel, task_id=offered.task.task_id, reason="r")
    world.run(request_cancel, task_id=running.task.task_id, reason="r")
    # The batch: a start on the revoked offer locks its lease (and task) first ...
    batch = connect(world.db)
    batch.autocommit(False)
    watcher = connect(world.db)
    with batch.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 20")
        cur.execute(lsql.LOCK_LEASE_AND_TASK, (offered.lease.lease_id,))
    once = SyncStore(world.db, pool_size=1, max_attempts=1)
    outcome: dict[str, object] = {}

    def notify() -> None:
        try:
            outcome["notify"] = once.run_sync(notify_cancellations, session_ids=[w.session_id], now=world.now)
        except Exception as exc:  # the assertion below shows it
            outcome["notify"] = exc

    t = threading.Thread(target=notify)
    t.start()
    try:
        _waiting_or_done(watcher, t)
        # ... then a finish of the running task resolves that task's intent.
        try:
            with batch.cursor() as cur:
                cur.execute(csql.LOCK_INTENT_STATE, (running.task.task_id,))
            outcome["batch"] = "locked"
        except pymysql.err.OperationalError as exc:
            outcome["batch"] = exc
        batch.rollback()
        t.join()
    finally:
        batch.close()
        watcher.close()
        once.close()
    assert outcome["batch"] == "locked", outcome
    # The running task's holder is told now; the offer held by the batch at a later tick.
    told = outcome["notify"]
    assert [n.task_id for n in told] == [running.task.task_id], outcome
    (later,) = world.run(notify_cancellations, session_ids=[w.session_id])
    assert later.task_id == offered.task.task_id
