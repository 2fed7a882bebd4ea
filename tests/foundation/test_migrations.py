"""Migrations: ordered, idempotent, locked, and refusing a newer database."""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
import threading
import time

import pytest

from pulse_trio import dburl
from pulse_trio.dburl import connect
from pulse_trio.store.schema.migrate import (
    MigrationError, available_migrations, code_version, current_version, migrate,
)


def _fresh(database_server, name: str):
    config = database_server.with_database(f"pulse_mig_{name}")
    conn = connect(config, database=False)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{config.database}`")
    conn.close()
    return config


def test_files_are_numbered_without_gaps():
    versions = [m.version for m in available_migrations()]
    assert versions == list(range(1, len(versions) + 1))
    assert code_version() == versions[-1]


class _Recording(dburl.Connection):
    """A real connection that keeps every statement it sent (to see what a helper asked of the server)."""

    sent: list[str] = []

    def query(self, sql, unbuffered=False):
        self.sent.append(sql if isinstance(sql, str) else sql.decode())
        return super().query(sql, unbuffered)


def test_create_database_sends_no_ddl_for_a_database_that_exists(database_server):
    """On Galera even ``CREATE DATABASE IF NOT EXISTS`` is a replicated DDL that can stop the cluster."""
    config = database_server.with_database(f"pulse_create_{secrets.token_hex(4)}")
    _Recording.sent = []

    def recording(cfg, *, database=True):
        return _Recording(**cfg.connect_kwargs(database=database))

    try:
        dburl.create_database(config, connector=recording)
        assert [sql for sql in _Recording.sent if sql.startswith("CREATE DATABASE")], "a missing database is created"
        _Recording.sent = []
        dburl.create_database(config, connector=recording)
        assert not [sql for sql in _Recording.sent if sql.upper().startswith("CREATE")], _Recording.sent
        assert any("information_schema.schemata" in sql for sql in _Recording.sent)
    finally:
        dburl.drop_database(config)


def test_migrate_twice_is_a_no_op(database_server):
    config = _fresh(database_server, "twice")
    first = migrate(config)
    assert [m.version for m in first] == [m.version for m in available_migrations()]
    assert migrate(config) == []
    assert current_version(config) == code_version()


def test_concurrent_migrations_apply_each_file_once(database_server):
    config = _fresh(database_server, "race")
    results: list[list] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(migrate(config))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    applied = sorted(m.version for r in results for m in r)
    assert applied == [m.version for m in available_migrations()]
    conn = connect(config)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM schema_migrations")
        assert cur.fetchone()[0] == code_version()
    conn.close()


def test_database_newer_than_code_is_refused(database_server):
    config = _fresh(database_server, "newer")
    migrate(config)
    conn = connect(config)
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, 'future', '2030-01-01')",
            (code_version() + 1,),
        )
    conn.commit()
    conn.close()
    with pytest.raises(MigrationError, match="newer than this code"):
        migrate(config)


@pytest.mark.parametrize("recorded", [3, 29])
def test_a_schema_migrations_table_of_another_application_is_refused(database_server, recorded):
    """A database whose ``schema_migrations`` another tool made (golang-migrate's: version, dirty) is not read
    as pulse-trio's: its version 3 had migrate create tables among the other application's and then fail as
    "cannot reach the database", and its version 29 had migrate report success on a database without a
    single table of pulse-trio's. Both are refused, naming the table, before anything is created."""
    config = _fresh(database_server, f"foreign_{recorded}")
    conn = connect(config, database=False)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{config.database}`")
        cur.execute(f"CREATE TABLE `{config.database}`.schema_migrations"
                    " (version BIGINT NOT NULL PRIMARY KEY, dirty BOOLEAN NOT NULL) ENGINE=InnoDB")
        cur.execute(f"INSERT INTO `{config.database}`.schema_migrations VALUES (%s, FALSE)", (recorded,))
    conn.commit()
    for read in (current_version, migrate):
        with pytest.raises(MigrationError, match="schema_migrations .*not pulse-trio's"):
            read(config)
    with conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (config.database,))
        assert cur.fetchall() == (("schema_migrations",),)
    conn.close()


def _older(database_server, name: str, version: int):
    """A fresh database at an older schema version, the moment its hand-written rows say, and their ids."""
    import datetime as dt

    config = _fresh(database_server, name)
    migrate(config, upto=version)
    ids = ("tsk_01KBFEY3G0XBZ69EGN1CRY6PPB", "lse_01KBFEY3G05SYNQT44FQ3AKSZY", "ses_01KBFEY3G0B1BKY7SP31HF1KWA")
    return config, dt.datetime(2026, 12, 1, 12, 0, 0), ids


def test_attempts_and_receipts_move_into_their_lease(database_server):
    """0008: an attempt row and its three receipts, written by the old schema, read back the same."""
    import datetime as dt

    import dataclasses

    from pulse_trio.store import FinishCommand, FinishReport, RenewCommand, StartCommand, finish, renew, start
    from pulse_trio.store.engine.trio_bridge import Store
    from pulse_trio.store.engine.ids import new_secret, secret_digest
    from pulse_trio.store.lease.leases import content_digest

    config, t0, (task, lease, session) = _older(database_server, "receipts", 7)
    secret = new_secret()
    report = FinishReport("SUCCEEDED", '{"sent":true}')
    commands = {1: StartCommand(session, task, lease, secret, 1), 2: RenewCommand(session, task, lease, secret, 2),
                3: FinishCommand(session, task, lease, secret, 3, report)}
    conn = connect(config)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO tasks (task_id, queue, kind, state, payload, due_at, effective_at, idempotency_key,"
                    " created_at, updated_at, attempt, finished_at, outcome_status, outcome_attempt)"
                    " VALUES (%s, 'q', 'k', 'SUCCEEDED', '{}', %s, %s, %s, %s, %s, 1, %s, 'SUCCEEDED', 1)",
                    (task, t0, t0, task, t0, t0, t0))
        cur.execute("INSERT INTO leases (lease_id, task_id, secret_digest, state, revision, attempt,"
                    " owner_instance_id, owner_session_id, epoch, expires_at, ttl_ms, effect_uncertain, offered_at,"
                    " started_at, ended_at) VALUES (%s, %s, %s, 'FINISHED', 4, 1, 'ins_01KBFEY3G08GKV6GQS8WWD954X',"
                    " %s, 1, %s, 30000, FALSE, %s, %s, %s)",
                    (lease, task, secret_digest(secret), session, t0, t0, t0, t0))
        cur.execute("INSERT INTO task_attempts (task_id, attempt, lease_id, instance_id, session_id, effect_uncertain,"
                    " started_at, ended_at, status, result) VALUES (%s, 1, %s, 'ins_01KBFEY3G08GKV6GQS8WWD954X', %s,"
                    " FALSE, %s, %s, 'SUCCEEDED', %s)", (task, lease, session, t0, t0, report.result_json))
        for rev, name, rep in ((1, "task.start", None), (2, "task.renew", None), (3, "task.finish", report)):
            cur.execute("INSERT INTO command_receipts (lease_id, revision, command, task_id, content_digest,"
                        " committed_at) VALUES (%s, %s, %s, %s, %s, %s)",
                        (lease, rev, name, task, content_digest(name, commands[rev], rep), t0))
    conn.commit()
    migrate(config)
    with conn.cursor() as cur:
        cur.execute("SELECT lease_id, status, result FROM task_attempts")
        assert cur.fetchall() == ((lease, "SUCCEEDED", report.result_json),)
        cur.execute("SELECT revision, command FROM command_receipts ORDER BY revision")
        assert cur.fetchall() == ((1, "task.start"), (2, "task.renew"), (3, "task.finish"))
    conn.close()
    store = Store(config, pool_size=1)
    try:
        now = dt.datetime(2026, 12, 1, 12, 5, tzinfo=dt.timezone.utc)
        for fn, rev in ((start, 1), (renew, 2), (finish, 3)):
            (result,) = store.run_sync(fn, commands=[commands[rev]], now=now)
            assert result.receipt.duplicate and result.receipt.revision == rev, (fn, result)
            assert result.receipt.committed_at == t0.replace(tzinfo=dt.timezone.utc)
        other = FinishReport("FAILED", '{"sent":false}', "boom")
        (refused,) = store.run_sync(finish, commands=[dataclasses.replace(commands[3], report=other)], now=now)
        assert refused.code == "revision_conflict"
    finally:
        store.close()


def test_two_migrate_processes_started_together_both_succeed(database_server):
    """The lock is a committed row, so two processes (on one server or two cluster nodes) serialise."""
    import subprocess
    import sys

    config = _fresh(database_server, "procs")
    url = config.url(redact=False)
    procs = [subprocess.Popen([sys.executable, "-m", "pulse_trio", "migrate", "--database-url", url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert current_version(config) == code_version()
    conn = connect(config)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM schema_migrations")
        assert cur.fetchone()[0] == code_version()
        cur.execute("SELECT COUNT(*) FROM schema_lock")
        assert cur.fetchone()[0] == 0  # released
    conn.close()


def test_a_lock_left_by_a_dead_run_is_taken_once_it_expires(database_server):
    import time

    from pulse_trio.store.schema.migrate import LOCK_NAME

    config = _fresh(database_server, "stale")
    migrate(config, upto=1)
    conn = connect(config)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO schema_lock (name, owner, expires_at) "
                    "VALUES (%s, 'dead:1', UTC_TIMESTAMP(6) + INTERVAL 1 SECOND)", (LOCK_NAME,))
    conn.commit()
    conn.close()
    with pytest.raises(MigrationError, match="could not take the migration lock"):
        migrate(config, lock_timeout_s=0.2)
    started = time.monotonic()
    assert [m.version for m in migrate(config)][-1] == code_version()
    assert time.monotonic() - started < 5


def test_an_up_to_date_schema_is_seen_without_the_lock(database_server):
    """Nothing to apply is known from the recorded version alone: a start never waits on another run's lock
    (nor opens the lock keeper's connection) then; anything to apply is looked at again under the lock."""
    from pulse_trio.store.schema.migrate import LOCK_NAME

    config = _fresh(database_server, "current")
    migrate(config)
    conn = connect(config)
    with conn.cursor() as cur:  # another run holds the lock, for longer than this test
        cur.execute("INSERT INTO schema_lock (name, owner, expires_at) "
                    "VALUES (%s, 'other:1', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)", (LOCK_NAME,))
    conn.commit()
    try:
        assert migrate(config, lock_timeout_s=0.2) == []
        assert migrate(config, upto=1, lock_timeout_s=0.2) == []
    finally:
        with conn.cursor() as cur:
            cur.execute("DELETE FROM schema_lock")
        conn.commit()
        conn.close()


def test_a_file_that_outlasts_the_lock_ttl_keeps_its_lock(database_server):
    """A statement may run longer than the lock's ttl (a table rebuild on millions of rows): the run keeps its
    lock meanwhile, so a run started beside it waits and finds nothing to do. Extended only between files, the
    lock expired under the statement; the second run took it and ran the same file, and the first failed on a
    lock it no longer held."""
    import time

    config = _fresh(database_server, "outlast")
    migrate(config, upto=4)
    blocker = connect(config)  # a transaction that read worker_instances: 0005's ALTER waits for its end
    with blocker.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("SELECT COUNT(*) FROM worker_instances")
    applied: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            applied[name] = [m.version for m in migrate(config, upto=6, lock_ttl_s=0.4, lock_timeout_s=10)]
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    first = threading.Thread(target=run, args=("first",))
    first.start()
    time.sleep(0.6)  # past the ttl, the first run still in 0005's ALTER
    second = threading.Thread(target=run, args=("second",))
    second.start()
    time.sleep(0.25)  # the second run waits for the lock (it took the lock and ran 0005 before)
    blocker.rollback()
    blocker.close()
    first.join()
    second.join()
    assert errors == []
    assert applied == {"first": [5, 6], "second": []}


def test_a_run_whose_lock_keeper_lost_its_connection_still_succeeds_and_releases_the_lock(database_server):
    """The keeper extends the lock from a connection of its own, which may be lost while a file runs (killed,
    a proxy's cut): the lock then lives on as before the keeper, to its expiry. A run whose every file applied
    is a success, and its lock is released through its own connection, which has just answered; released
    through the keeper's lost one, the run failed after applying everything."""
    config = _fresh(database_server, "keeper_lost")
    migrate(config, upto=4)
    blocker = connect(config)  # a transaction that read worker_instances: 0005's ALTER waits for its end
    with blocker.cursor() as cur:
        cur.execute("SELECT CONNECTION_ID()")
        (mine,) = cur.fetchone()
        cur.execute("BEGIN")
        cur.execute("SELECT COUNT(*) FROM worker_instances")
    applied: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            applied.extend(m.version for m in migrate(config, upto=6))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while True:  # the run's own connection waits in 0005's ALTER; its keeper's sits idle
            with blocker.cursor() as cur:
                cur.execute("SELECT id, command, state FROM information_schema.processlist WHERE db = %s AND id <> %s",
                            (config.database, mine))
                rows = cur.fetchall()
            idle = [row[0] for row in rows if row[1] == "Sleep"]
            if any(row[2] == "Waiting for table metadata lock" for row in rows) and len(idle) == 1:
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.05)
        with blocker.cursor() as cur:
            cur.execute("KILL CONNECTION %s", (idle[0],))
    finally:
        blocker.rollback()
        blocker.close()
        runner.join()
    assert errors == [] and applied == [5, 6], errors
    conn = connect(config)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM schema_lock")
        assert cur.fetchone()[0] == 0
    conn.close()


def _wait_for_a_statement_waiting_on(conn, proc: subprocess.Popen, database: str) -> None:
    """Until a statement of ``proc``'s waits for the table lock ``conn``'s open transaction holds."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.processlist"
                        " WHERE db = %s AND state = 'Waiting for table metadata lock'", (database,))
            if cur.fetchone()[0]:
                return
        time.sleep(0.05)
    raise AssertionError("no statement waits")


@pytest.mark.live  # it runs pulse-trio processes
@pytest.mark.parametrize("command, signum, exit_code", [
    (["migrate"], signal.SIGINT, 130),
    (["serve", "--worker-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"], signal.SIGTERM, 0),
], ids=["migrate-ctrl-c", "serve-sigterm"])
def test_a_stop_while_a_file_runs_exits_as_a_stop_and_releases_the_lock(database_server, tmp_path, command,
                                                                         signum, exit_code):
    """Ctrl-C on `migrate`, or a service manager's stop of a `serve` still migrating, while a file runs: the
    command exits as a stop does (130; 0 for serve's SIGTERM), without a traceback, and the lock is free at once.
    The release went through the connection the interrupt had left mid-statement: its error hid the interrupt
    (exit 1, or 70 for serve, with tracebacks) and left the lock held until it expired."""
    config = _fresh(database_server, f"stop_{command[0]}")
    migrate(config, upto=4)
    blocker = connect(config)  # a transaction that read worker_instances: 0005's ALTER waits for its end
    with blocker.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("SELECT COUNT(*) FROM worker_instances")
    proc = subprocess.Popen([sys.executable, "-m", "pulse_trio", *command, "--database-url", config.url(redact=False),
                             "--state-dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_a_statement_waiting_on(blocker, proc, config.database)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        blocker.rollback()
        blocker.close()
    assert (proc.returncode, "Traceback" in err) == (exit_code, False), err
    conn = connect(config)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM schema_lock")
        assert cur.fetchone()[0] == 0
    conn.close()


def test_already_exists_rereads_the_version(database_server):
    """A file another run applied meanwhile is skipped; a half-applied one stays a loud error."""
    import datetime as dt

    from pulse_trio.store.schema.migrate import apply_file

    config = _fresh(database_server, "exists")
    migrate(config)
    last = available_migrations()[-1]
    first = available_migrations()[0]
    conn = connect(config)
    try:
        assert apply_file(conn, first, dt.datetime(2026, 1, 1)) is False  # recorded: someone else's work
        with conn.cursor() as cur:
            cur.execute("DELETE FROM schema_migrations WHERE version = %s", (first.version,))
        conn.commit()
        with pytest.raises(MigrationError, match="not recorded"):
            apply_file(conn, first, dt.datetime(2026, 1, 1))
    finally:
        conn.close()
    assert last.version == code_version()


def test_epochs_go_on_above_the_counter_they_replace(database_server):
    """0020: the epoch counter row gives way to AUTO_INCREMENT; new epochs continue above its last one."""
    import datetime as dt

    from pulse_trio.store import NewInstance, SubscribedQueue, register
    from pulse_trio.store.engine.trio_bridge import Store

    config = _fresh(database_server, "epochs")
    migrate(config, upto=19)
    conn = connect(config)
    with conn.cursor() as cur:
        # Two registrations of the old code, then a gap (rows pruned) before the counter's last epoch.
        for i, epoch in enumerate((6, 7)):
            cur.execute("INSERT INTO worker_instances (instance_id, session_id, epoch, secret_digest, state,"
                        " worker_name, subscriptions, cancellation_notifications, concurrency_keys, capacity,"
                        " registered_at, updated_at) VALUES (%s, %s, %s, %s, 'DISCONNECTED', 'w', '[]', FALSE,"
                        " FALSE, 0, '2026-12-01', '2026-12-01')",
                        (f"ins_{i:026d}", f"ses_{i:026d}", epoch, b"\0" * 32))
        cur.execute("UPDATE epoch_counter SET last_epoch = 41")
    conn.commit()
    conn.close()
    migrate(config)
    store = Store(config, pool_size=1)
    try:
        now = dt.datetime(2026, 12, 1, 12, 5, tzinfo=dt.timezone.utc)
        epochs = [store.run_sync(register, instance=NewInstance("w", (SubscribedQueue("q"),)), now=now)
                  .instance.epoch for _ in range(2)]
    finally:
        store.close()
    assert epochs == [42, 43]


def test_a_task_an_older_version_started_is_held_and_finishes_at_its_attempt(database_server):
    """0024: a RUNNING row (the start wrote it before) becomes OFFERED at the attempt before its lease's;
    readers still see it RUNNING at the lease's attempt, and its finish records that attempt."""
    import datetime as dt

    from pulse_trio.store import FinishCommand, FinishReport, finish
    from pulse_trio.store.engine.ids import new_secret, secret_digest
    from pulse_trio.store.engine.trio_bridge import Store
    from pulse_trio.store.views.task import get_task

    config, t0, (task, lease, session) = _older(database_server, "held", 23)
    secret = new_secret()
    conn = connect(config)
    with conn.cursor() as cur:
        # The second attempt, started by the older version: the task row RUNNING at attempt 2.
        cur.execute("INSERT INTO tasks (task_id, queue, kind, state, payload, due_at, effective_at, idempotency_key,"
                    " created_at, updated_at, attempt) VALUES (%s, 'q', 'k', 'RUNNING', '{}', %s, %s, %s, %s, %s, 2)",
                    (task, t0, t0, task, t0, t0))
        cur.execute("INSERT INTO leases (lease_id, task_id, secret_digest, state, revision, attempt,"
                    " owner_instance_id, owner_session_id, epoch, expires_at, ttl_ms, effect_uncertain, offered_at,"
                    " started_at, start_revision) VALUES (%s, %s, %s, 'RUNNING', 2, 2, 'ins_01KBFEY3G08GKV6GQS8WWD954Y',"
                    " %s, 1, %s, 30000, FALSE, %s, %s, 1)",
                    (lease, task, secret_digest(secret), session, t0 + dt.timedelta(seconds=30), t0, t0))
    conn.commit()
    migrate(config)
    with conn.cursor() as cur:
        cur.execute("SELECT state, attempt FROM tasks")
        assert cur.fetchall() == (("OFFERED", 1),)
    conn.close()
    store = Store(config, pool_size=1)
    try:
        view = store.run_sync(get_task, task_id=task)
        assert (view.task.state, view.task.attempt) == ("RUNNING", 2)
        now = dt.datetime(2026, 12, 1, 12, 0, 5, tzinfo=dt.timezone.utc)
        (done,) = store.run_sync(finish, commands=[FinishCommand(session, task, lease, secret, 2,
                                                                 FinishReport("SUCCEEDED", "{}"))], now=now)
        assert done.receipt.command == "task.finish", done
        view = store.run_sync(get_task, task_id=task)
        assert (view.task.state, view.task.attempt, view.task.outcome_attempt) == ("SUCCEEDED", 2, 2)
    finally:
        store.close()


def test_set_aside_marks_that_no_release_would_clear_are_dropped(database_server):
    """0025: a mark outside READY is dropped, and so are the marks of a key with no permit out (nothing would
    bring those tasks back); the set-aside tasks of a key whose permit is out keep waiting for its release."""
    config, t0, _ = _older(database_server, "set_aside", 24)
    rows = {  # task id: (key, state, set aside)
        "tsk_01KBFEY3G00000000000000001": ("stranded", "READY", True),
        "tsk_01KBFEY3G00000000000000002": ("stranded", "SCHEDULED", True),
        "tsk_01KBFEY3G00000000000000003": ("held", "READY", True),
        "tsk_01KBFEY3G00000000000000004": ("held", "OFFERED", True),
        "tsk_01KBFEY3G00000000000000005": ("held", "READY", False),
    }
    conn = connect(config)
    with conn.cursor() as cur:
        for task_id, (key, state, waits) in rows.items():
            cur.execute("INSERT INTO tasks (task_id, queue, kind, state, payload, due_at, effective_at,"
                        " idempotency_key, created_at, updated_at, concurrency_key, waits_for_key)"
                        " VALUES (%s, 'q', 'k', %s, '{}', %s, %s, %s, %s, %s, %s, %s)",
                        (task_id, state, t0, t0, task_id, t0, t0, key, waits))
        cur.execute("INSERT INTO key_counters (concurrency_key, last_token, outstanding)"
                    " VALUES ('stranded', 4, 0), ('held', 9, 1)")
    conn.commit()
    migrate(config)
    with conn.cursor() as cur:
        cur.execute("SELECT task_id, waits_for_key FROM tasks ORDER BY task_id")
        marks = dict(cur.fetchall())
    conn.close()
    assert marks == {"tsk_01KBFEY3G00000000000000001": 0, "tsk_01KBFEY3G00000000000000002": 0,
                     "tsk_01KBFEY3G00000000000000003": 1, "tsk_01KBFEY3G00000000000000004": 0,
                     "tsk_01KBFEY3G00000000000000005": 0}


def test_the_waiting_tasks_of_a_key_with_no_permit_out_compete_again(database_server):
    """0028: a release that brought back only tasks where nobody takes them left the key's other tasks set aside
    with no permit out; those compete again, while a key whose permit is out keeps waiting for its release."""
    config, t0, _ = _older(database_server, "key_places", 27)
    rows = {  # task id: (key, queue)
        "tsk_01KBFEY3G00000000000000001": ("stalled", "paused"),
        "tsk_01KBFEY3G00000000000000002": ("stalled", "q"),
        "tsk_01KBFEY3G00000000000000003": ("held", "q"),
    }
    conn = connect(config)
    with conn.cursor() as cur:
        for task_id, (key, queue) in rows.items():
            cur.execute("INSERT INTO tasks (task_id, queue, kind, state, payload, due_at, effective_at,"
                        " idempotency_key, created_at, updated_at, concurrency_key, waits_for_key)"
                        " VALUES (%s, %s, 'k', 'READY', '{}', %s, %s, %s, %s, %s, %s, TRUE)",
                        (task_id, queue, t0, t0, task_id, t0, t0, key))
        cur.execute("INSERT INTO key_counters (concurrency_key, last_token, outstanding)"
                    " VALUES ('stalled', 4, 0), ('held', 9, 1)")
    conn.commit()
    migrate(config)
    with conn.cursor() as cur:
        cur.execute("SELECT task_id, pick_state FROM tasks ORDER BY task_id")
        picks = dict(cur.fetchall())
    conn.close()
    assert picks == {"tsk_01KBFEY3G00000000000000001": "KEYED", "tsk_01KBFEY3G00000000000000002": "KEYED",
                     "tsk_01KBFEY3G00000000000000003": "KEY_WAIT"}


@pytest.mark.parametrize("stored_ms, after_ms", [(200, 500), (499, 500), (500, 500), (30_000, 30_000)])
def test_a_cluster_lease_ttl_stored_under_half_a_second_is_raised_to_it(database_server, stored_ms, after_ms):
    """0029: a lease_ttl written before its 0.5 s bound (every such lease lapsed before its renewal) is raised
    to the bound; one within it stays as written."""
    config, t0, _ = _older(database_server, f"lease_floor_{stored_ms}", 28)
    conn = connect(config)
    with conn.cursor() as cur:
        cur.execute("UPDATE cluster_settings SET value_ms = %s, updated_by = 'cli:old', updated_at = %s"
                    " WHERE name = 'lease_ttl'", (stored_ms, t0))
    conn.commit()
    migrate(config)
    with conn.cursor() as cur:
        cur.execute("SELECT value_ms, updated_by FROM cluster_settings WHERE name = 'lease_ttl'")
        assert cur.fetchall() == ((after_ms, "cli:old"),)
    conn.close()


def test_revoked_offers_whose_holder_was_told_leave_the_revoked_filing(database_server):
    """0030: a revoked offer whose holder was told leaves leases_owner's REVOKED filing (the ticks read it no
    more); one whose holder is still to be told stays there for the push."""
    config, t0, (_, _, session) = _older(database_server, "told_offers", 29)
    told, untold = "lse_01KBFEY3G00000000000000001", "lse_01KBFEY3G00000000000000002"
    conn = connect(config)
    with conn.cursor() as cur:
        for n, lease in enumerate((told, untold), start=1):
            task = f"tsk_01KBFEY3G0000000000000000{n}"
            cur.execute("INSERT INTO tasks (task_id, queue, kind, state, payload, due_at, effective_at,"
                        " idempotency_key, created_at, updated_at) VALUES (%s, 'q', 'k', 'CANCELLED', '{}', %s, %s,"
                        " %s, %s, %s)", (task, t0, t0, task, t0, t0))
            cur.execute("INSERT INTO leases (lease_id, task_id, secret_digest, state, revision, attempt,"
                        " owner_instance_id, owner_session_id, epoch, expires_at, ttl_ms, effect_uncertain,"
                        " offered_at, ended_at, cancel_requested_at) VALUES (%s, %s, %s, 'REVOKED', 1, 1,"
                        " 'ins_01KBFEY3G08GKV6GQS8WWD954Y', %s, 1, %s, 30000, FALSE, %s, %s, %s)",
                        (lease, task, b"\0" * 32, session, t0, t0, t0, t0))
            cur.execute("INSERT INTO cancel_intents (task_id, state, requested_at, task_state, lease_id,"
                        " notified_session_id, notified_at, resolved_at) VALUES (%s, 'RESOLVED', %s, 'OFFERED', %s,"
                        " %s, %s, %s)", (task, t0, lease, session if lease == told else None,
                                         t0 if lease == told else None, t0))
    conn.commit()
    migrate(config)
    with conn.cursor() as cur:
        cur.execute("SELECT lease_id, hold FROM leases")
        assert dict(cur.fetchall()) == {told: None, untold: "REVOKED"}
    conn.close()


def test_a_0030_cut_off_after_its_first_statement_rebuilds_leases_once_in_all(database_server):
    """0030 clears the told offers before it redefines ``hold``: the ALTER, which rebuilds the leases table, is
    its last statement, so a run cut off between the two (each statement commits as it runs) has not rebuilt
    the table yet and the re-run rebuilds it once. InnoDB gives a rebuilt table a new id."""
    from pulse_trio.store.schema.migrate import available_migrations

    config, _, _ = _older(database_server, "told_offers_cut", 29)
    (file,) = [m for m in available_migrations() if m.version == 30]
    conn = connect(config)

    def table_id() -> int:
        with conn.cursor() as cur:
            cur.execute("SELECT TABLE_ID FROM information_schema.INNODB_SYS_TABLES"
                        " WHERE NAME = CONCAT(DATABASE(), '/leases')")
            (found,) = cur.fetchone()
        conn.rollback()
        return found

    before = table_id()
    with conn.cursor() as cur:
        cur.execute(file.statements()[0])  # the run that was cut off: its first statement, committed
    conn.commit()
    cut = table_id()
    migrate(config)
    rebuilds = (cut != before) + (table_id() != cut)
    conn.close()
    assert rebuilds == 1, (before, cut)
