"""The store on a real Galera cluster: migrations on two nodes, the writer choice, error classes."""

from __future__ import annotations

import contextlib
import datetime as dt
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pymysql
import pytest

from pulse_trio.dburl import connect_node
from pulse_trio.store.engine.writer import (
    FOLLOW_AFTER_S, PROBE_TIMEOUT_S, WriterSelector, connect, create_database, writer_for,
)
from pulse_trio.store import NewTask, get_task, register, submit
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.inputs import NewInstance, SubscribedQueue
from pulse_trio.store.schema.migrate import code_version, current_version, migrate

#: The read timeout of the pooled connections of a test whose writer hangs (the pool's own is half a minute).
STATEMENT_TIMEOUT_S = 4.0
from pulse_trio.store.engine.registry import read_only

pytestmark = pytest.mark.galera

NOW = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.timezone.utc)


def _count(node, database: str, sql: str) -> int:
    with contextlib.closing(node.connect()) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION wsrep_sync_wait = 1")
        cur.execute(f"SELECT COUNT(*) FROM `{database}`.{sql}")
        return cur.fetchone()[0]


def test_two_migrate_processes_on_two_nodes_both_succeed(cluster, database_name):
    """GET_LOCK would be local to each node; the committed lock row is not."""
    first, second = cluster.nodes[0], cluster.nodes[1]
    procs = [subprocess.Popen([sys.executable, "-m", "pulse_trio", "migrate", "--database-url",
                               cluster.url(database_name, [node])],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for node in (first, second)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n----\n".join(err[-2500:] for _, err in outputs)
    for node in cluster.nodes:
        assert _count(node, database_name, "schema_migrations") == code_version()
        assert _count(node, database_name, "schema_lock") == 0
    assert current_version(cluster.config(database_name)) == code_version()


def test_two_serve_processes_started_together_on_two_nodes_both_come_up(cluster, database_name, tmp_path):
    """``serve`` migrates at start: two on two nodes of a fresh database must not crash one another."""
    import signal

    from chaos_fleet import free_port, wait_port

    ports = [free_port(), free_port()]
    procs = [subprocess.Popen(
        [sys.executable, "-m", "pulse_trio", "serve", "--database-url", cluster.url(database_name, [node]),
         "--worker-listen", f"127.0.0.1:{port}", "--http-listen", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for node, port in zip(cluster.nodes[:2], ports)]
    try:
        for port, proc in zip(ports, procs):
            wait_port(port, timeout=90)
            assert proc.poll() is None
        assert current_version(cluster.config(database_name)) == code_version()
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=30) for proc in procs]
    assert codes == [0, 0], [proc.stderr.read()[-2000:] for proc in procs]


def _databases_created(node) -> int:
    """How many ``CREATE DATABASE`` statements clients have run on ``node`` (its ``Com_create_db``)."""
    with contextlib.closing(node.connect()) as conn, conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Com_create_db'")
        return int(cur.fetchone()[1])


def test_creating_a_database_that_exists_sends_no_ddl_to_any_node(cluster, database_name):
    """Even ``CREATE DATABASE IF NOT EXISTS`` is a replicated DDL, and it can stop the cluster.

    Applied on a node where a migration is running DDL in that database, it
    waits for that connection's schema lock while the connection waits for its
    turn behind it. So a database that exists, seen through any node with a
    causal read, is not created again.
    """
    n1, n2, n3 = cluster.nodes
    before = _databases_created(n1)
    create_database(cluster.config(database_name, [n1]))
    assert _databases_created(n1) == before + 1, "the missing database is created"
    migrate(cluster.config(database_name, [n2]))
    counts = [_databases_created(node) for node in cluster.nodes]
    for node in cluster.nodes:
        create_database(cluster.config(database_name, [node]))
    assert [_databases_created(node) for node in cluster.nodes] == counts


def test_every_process_picks_the_first_synced_node_and_sticks_to_it(cluster, database_name):
    config = cluster.config(database_name)
    migrate(config)
    n1, n2, _ = cluster.nodes
    selector = writer_for(config)
    selector.reset()  # whatever an earlier test left: choose as a fresh process would
    assert selector.current() == ("127.0.0.1", n1.port)
    with contextlib.closing(connect(config)) as conn:
        assert conn.port == n1.port
    late = WriterSelector(config)  # another process's choice, on n1 too
    assert late.current() == ("127.0.0.1", n1.port)

    n1.isolate()
    _wait(lambda: not n1.synced())
    selector.failed(("127.0.0.1", n1.port))
    assert selector.current() == ("127.0.0.1", n2.port)
    n1.isolate(False)
    n1.wait_synced(60, cluster_size=3)
    selector.failed(("127.0.0.1", n2.port))  # a blip on the writer: it is re-checked, and kept
    assert selector.current() == ("127.0.0.1", n2.port), "a node that came back does not pull the writer back"
    late.failed(("127.0.0.1", n1.port))  # its failure seen only now, with n1 ready again
    assert late.current() == ("127.0.0.1", n2.port), "a re-check joins the recorded writer"
    selector.reset()  # a process that starts now reads the recorded writer
    assert selector.current() == ("127.0.0.1", n2.port), "nor does it pull a newly started process"
    for fresh in (cluster.config(database_name), cluster.config(database_name, [n1, n2])):
        script = ("from pulse_trio.dburl import parse_database_url; from pulse_trio.store.engine.writer import connect; "
                  f"print(connect(parse_database_url({fresh.url(redact=False)!r})).port)")
        port = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert port.stdout.strip() == str(n2.port), port.stderr


@read_only
def _node_port(tx):
    return tx.one("SELECT @@port")[0]


#: Another process on the same URL: one transaction at start, then one for each line it reads.
NODE_PORTS = textwrap.dedent("""
    import sys
    from pulse_trio.dburl import parse_database_url
    from pulse_trio.store.engine.registry import read_only
    from pulse_trio.store.engine.trio_bridge import Store

    @read_only
    def port(tx):
        return tx.one("SELECT @@port")[0]

    store = Store(parse_database_url(sys.argv[1]), pool_size=1)
    print(store.run_sync(port), flush=True)
    for line in sys.stdin:
        print(store.run_sync(port), flush=True)
""")


def test_a_process_idle_through_a_failover_joins_the_others_when_it_next_writes(cluster, database_name):
    """One writer for every process (docs/deployment.md §2), even for one that saw no failure.

    n1 leaves the primary component while this process (A) works and a
    child process (B) is idle; A moves to n2 and records it, and n1 comes
    back Synced. B's pooled connection to n1 is still good, so it never
    sees a failure: it re-reads the record before its next write once
    ``FOLLOW_AFTER_S`` have passed, and writes through n2 from then on.
    """
    config = cluster.config(database_name)
    migrate(config)
    n1, n2, _ = cluster.nodes
    writer_for(config).reset()
    a = Store(config, pool_size=2)
    b = subprocess.Popen([sys.executable, "-c", NODE_PORTS, config.url(redact=False)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert int(b.stdout.readline()) == n1.port
        b_looked = time.monotonic()  # B read the record when it chose
        assert a.run_sync(_node_port) == n1.port
        n1.isolate()
        _wait(lambda: not n1.synced())
        assert a.run_sync(_node_port) == n2.port  # 1047: A re-checks, moves to n2 and records it
        n1.isolate(False)
        n1.wait_synced(60, cluster_size=3)
        time.sleep(max(0.0, b_looked + FOLLOW_AFTER_S - time.monotonic()))
        a_ports, b_ports = [], []
        for _ in range(3):
            a_ports.append(a.run_sync(_node_port))
            b.stdin.write("next\n")
            b.stdin.flush()
            b_ports.append(int(b.stdout.readline()))
        assert a_ports == [n2.port] * 3
        assert b_ports == a_ports, f"B writes through {b_ports}, A through {a_ports} (n1={n1.port}, n2={n2.port})"
    finally:
        a.close()
        b.kill()
        b.wait()


def test_a_task_view_finds_a_task_committed_through_another_node(cluster, database_name):
    """Around a failover two processes write through two nodes for a few seconds (docs/deployment.md §2).

    A task submitted through one is found at once by the other's task view
    (docs/storage.md §10): the view ran in a transaction on the writer's
    connections, without the causal read, and on a node that had not applied
    the commit yet it answered "unknown task".
    """
    n1, n2, _ = cluster.nodes
    a_config, b_config = cluster.config(database_name, [n1, n2]), cluster.config(database_name, [n2, n1])
    migrate(a_config)

    def forget_the_record() -> None:  # so neither process follows the other within the test
        with contextlib.closing(n2.connect()) as conn, conn.cursor() as cur:
            # After the record written through n1 has reached n2 (reads and deletes wait for it): else the
            # DELETE finds nothing yet, and the second process follows the first one's writer.
            cur.execute("SET SESSION wsrep_sync_wait = 15")
            cur.execute(f"DELETE FROM `{database_name}`.db_writer")

    writer_for(a_config).reset()
    writer_for(b_config).reset()
    a, b = Store(a_config, pool_size=1), Store(b_config, pool_size=1)
    try:
        assert a.run_sync(_node_port) == n1.port
        forget_the_record()
        assert b.run_sync(_node_port) == n2.port
        forget_the_record()
        missing = _unknown_to_the_other(a, b)
        assert (writer_for(a_config).writer, writer_for(b_config).writer) == (("127.0.0.1", n1.port),
                                                                              ("127.0.0.1", n2.port))
    finally:
        a.close()
        b.close()
    assert missing == 0, f"{missing} of 100 tasks just submitted through n1 were unknown to a view on n2"


def test_a_task_view_through_one_address_finds_a_task_committed_through_another_node(cluster, database_name):
    """A URL of one address (a proxy in front of the cluster, docs/deployment.md §2) reads causally too.

    The proxy moves processes from node to node one connection at a time, so
    around a failover a commit through one node is followed by a view through
    another, as with several hosts; only a URL of several hosts set the wait.
    """
    n1, n2, _ = cluster.nodes
    migrate(cluster.config(database_name, [n1]))
    a, b = (Store(cluster.config(database_name, [node]), pool_size=1) for node in (n1, n2))
    try:
        missing = _unknown_to_the_other(a, b)
    finally:
        a.close()
        b.close()
    assert missing == 0, f"{missing} of 100 tasks just submitted through n1 were unknown to a view on n2"


def _unknown_to_the_other(a: Store, b: Store, count: int = 100) -> int:
    """How many of ``count`` tasks, each submitted through ``a``, ``b``'s task view did not find just after."""
    missing = 0
    for _ in range(count):
        (submitted,) = a.run_sync(submit, tasks=[NewTask("q", "k")], now=NOW)
        missing += b.run_sync(get_task, task_id=submitted.task_id) is None
    return missing


def test_a_node_that_is_not_ready_is_treated_as_a_lost_connection(cluster, database_name):
    """1047 'WSREP has not yet prepared node': the connection is dropped and the run moves to a ready node."""
    n1, n2, _ = cluster.nodes
    isolated = cluster.config(database_name, [n1])
    migrate(isolated)
    conn = connect_node(isolated)
    n1.isolate()
    _wait(lambda: not n1.synced())
    with pytest.raises(pymysql.err.MySQLError) as caught, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM tasks")
    conn.close()
    from pulse_trio.store.engine.failures import LOST, classify

    assert caught.value.args[0] == 1047 and classify(caught.value) == LOST

    config = cluster.config(database_name, [n1, n2])
    writer_for(config).reset()
    store = Store(config, pool_size=2)
    try:
        assert store.run_sync(_node_port) == n2.port
    finally:
        store.close()


def test_a_writer_that_hangs_is_failed_over_from_once_a_statement_times_out(cluster, database_name):
    """n1's mariadbd is frozen (SIGSTOP: a dead disk, a stopped VM) with a pooled connection open to it.

    Its kernel keeps the connection open and Galera evicts it, so n2 and n3
    go on as the primary component; no failure comes from n1 itself. The
    transaction's statement gives up after its read timeout (2013, a lost
    connection; the pool's is half a minute, 4 s here so that the test does
    not wait it out), the probe of n1 gets no greeting either, and the run
    moves to n2.
    """
    config = cluster.config(database_name)
    migrate(config)
    n1, n2, n3 = cluster.nodes
    writer_for(config).reset()
    store = Store(config, pool_size=1, connector=lambda c: connect(c, io_timeout=STATEMENT_TIMEOUT_S))
    try:
        assert store.run_sync(_node_port) == n1.port  # one pooled connection to n1, idle and fresh
        n1.process.send_signal(signal.SIGSTOP)
        _wait(lambda: n2.synced(cluster_size=2) and n3.synced(cluster_size=2))
        answer: list = []

        def run() -> None:
            try:
                answer.append(store.run_sync(_node_port))
            except BaseException as exc:  # noqa: BLE001 - reported below
                answer.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(STATEMENT_TIMEOUT_S + PROBE_TIMEOUT_S + 15)  # and a loaded 2-core machine
        assert answer == [n2.port], f"{answer or 'still blocked on n1'}; writer {writer_for(config).writer}"
    finally:
        n1.kill()  # SIGKILL ends a stopped process too; the fixture restarts it (IST)
        store.close()


def test_a_commit_cut_off_by_isolation_is_re_checked_before_answering(cluster, database_name):
    """The writer leaves the primary component between a transaction's writes and its COMMIT.

    Whatever the node answers (1047, 1180, a lost connection), the outcome
    is unknown to the caller; the run re-checks it on the next writer and
    the registration exists exactly once.
    """
    n1, n2, n3 = cluster.nodes
    config = cluster.config(database_name)
    migrate(config)
    selector = writer_for(config)
    selector.reset()
    assert selector.current() == ("127.0.0.1", n1.port)
    seen: list[BaseException] = []

    class IsolateBeforeCommit:
        """A real connection to node 1 whose first COMMIT is sent after node 1 was isolated."""

        armed = True

        def __init__(self, real):
            self._real = real
            self.host, self.port = real.host, real.port
            self.commits = 0

        def __getattr__(self, name):
            return getattr(self._real, name)

        def commit(self):
            self.commits += 1  # the first ends the pool's session set-up
            if IsolateBeforeCommit.armed and self.port == n1.port and self.commits == 2:
                IsolateBeforeCommit.armed = False
                n1.isolate()
                _wait(lambda: not n1.synced())
                try:
                    return self._real.commit()
                except BaseException as exc:
                    seen.append(exc)
                    raise
            return self._real.commit()

    store = Store(config, pool_size=2, connector=lambda c: IsolateBeforeCommit(connect(c)))
    instance = NewInstance("galera-worker", (SubscribedQueue("q"),))
    try:
        result = store.run_sync(register, instance=instance, now=NOW)
    finally:
        store.close()
    assert result.instance.instance_id == instance.instance_id
    assert seen, "the commit on the isolated node failed"
    from pulse_trio.store.engine.failures import LOST, classify

    assert classify(seen[0]) == LOST, f"{seen[0]!r} is a lost connection: the outcome is unknown"
    assert selector.current() != ("127.0.0.1", n1.port)
    n1.isolate(False)
    n1.wait_synced(60, cluster_size=3)
    assert _count(n2, database_name, "worker_instances") == 1
    stats = store.statistics()
    assert stats.retries >= 1 and stats.recoveries == 1, "the re-run re-read its outcome first"
    print(f"\ncommit on an isolated node failed with {seen[0]!r}")


def test_certification_failures_are_retried_like_deadlocks(cluster, database_name):
    """Two writers on two nodes update one row at once: the loser's COMMIT fails certification (1213)."""
    n1, n2, _ = cluster.nodes
    config = cluster.config(database_name, [n1])
    migrate(config)
    with contextlib.closing(connect_node(config)) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE galera_counter (id INT PRIMARY KEY, n INT NOT NULL)")
        cur.execute("INSERT INTO galera_counter VALUES (1, 0)")
        conn.commit()
    # n2 applies what n1 committed (the migration's DDL, this table) in its own time: a causal read
    # there waits until it has, so the writers race on the row, not on the table's replication.
    with contextlib.closing(n2.connect()) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION wsrep_sync_wait = 1")
        cur.execute(f"SELECT n FROM `{database_name}`.galera_counter WHERE id = 1")
        assert cur.fetchone() == (0,)
    per_writer, failures = 20, []
    together = threading.Barrier(2)
    local = threading.local()

    @read_only
    def bump(tx):
        # A write outside the store's transitions would be refused; this one only tests
        # the retry of a real certification failure through the facade.
        tx.cursor.execute("UPDATE galera_counter SET n = n + 1 WHERE id = 1")
        tx.wrote = True
        if not getattr(local, "met", False):  # both rows changed, on two nodes, before either commits
            local.met = True
            together.wait(timeout=10)
        return True

    stores = [Store(cluster.config(database_name, [node]), pool_size=1, max_attempts=50) for node in (n1, n2)]

    def hammer(store):
        try:
            for _ in range(per_writer):
                store.run_sync(bump)
        except BaseException as exc:  # surfaced below
            failures.append(exc)

    threads = [threading.Thread(target=hammer, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    stats = [s.statistics() for s in stores]
    for s in stores:
        s.close()
    assert failures == []
    with contextlib.closing(n2.connect()) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION wsrep_sync_wait = 1")
        cur.execute(f"SELECT n FROM `{database_name}`.galera_counter WHERE id = 1")
        (n,) = cur.fetchone()
    # A commit whose answer was lost is run again (``recovering``); this bare UPDATE does not
    # re-read, so each such recovery may count twice. Every other run counts exactly once.
    recoveries = sum(st.recoveries for st in stats)
    assert 2 * per_writer <= n <= 2 * per_writer + recoveries, (n, stats)
    assert sum(st.retries for st in stats) >= 1, "two nodes changing one row at once conflict: one is retried"


def _wait(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.1)
