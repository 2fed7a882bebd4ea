"""Transactional enqueue: the task exists if and only if the caller's own transaction commits.

The caller writes its business row and submits the task on one PyMySQL
connection, in one transaction; other connections see neither until the
commit, and a rollback leaves neither behind.
"""

from __future__ import annotations

import pymysql
import pymysql.cursors
import pytest

from pulse_trio.client import Client, TaskNotFound
from pulse_trio.client.producer import InvalidRequest
from pulse_trio.dburl import connect


@pytest.fixture
def conn(db):
    connection = connect(db)
    with connection.cursor() as cur:
        # A temporary table is the caller's "business" table: private to this
        # connection, and creating it does not commit anything.
        cur.execute("CREATE TEMPORARY TABLE orders (id INT PRIMARY KEY, task_id VARCHAR(40)) ENGINE=InnoDB")
    connection.commit()
    yield connection
    connection.close()


def _enqueue_order(client: Client, conn, order_id: int) -> str:
    conn.begin()
    task = client.submit("billing", "invoice.send", {"order": order_id}, connection=conn,
                         idempotency_key=f"order-{order_id}")
    with conn.cursor() as cur:
        cur.execute("INSERT INTO orders (id, task_id) VALUES (%s, %s)", (order_id, task["task_id"]))
    return task["task_id"]


def test_commit_makes_the_task_exist(client: Client, conn):
    task_id = _enqueue_order(client, conn, 1)
    with pytest.raises(TaskNotFound):  # not visible to others before the caller commits
        client.get(task_id)
    conn.commit()
    shown = client.get(task_id)
    assert shown["state"] == "READY" and shown["payload"] == {"order": 1}
    with conn.cursor() as cur:
        cur.execute("SELECT task_id FROM orders WHERE id = 1")
        assert cur.fetchone() == (task_id,)


def test_rollback_leaves_no_task(client: Client, conn):
    task_id = _enqueue_order(client, conn, 2)
    conn.rollback()
    with pytest.raises(TaskNotFound):
        client.get(task_id)
    assert client.list(queue="billing")["tasks"] == []
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM orders")
        assert cur.fetchone() == (0,)
    # The same business identity can be enqueued again: nothing of the rolled-back try remains.
    again = _enqueue_order(client, conn, 2)
    conn.commit()
    assert client.get(again)["idempotency_key"] == "order-2"


def test_a_known_key_committed_after_the_callers_snapshot_returns_its_task(client: Client, conn):
    """A caller's REPEATABLE READ transaction reads first; meanwhile another producer submits the same key.

    The submit on the caller's connection returns that task (created False), as a known key does anywhere
    (docs/worker.md §12.2), not the duplicate-key error its snapshot would otherwise leave it with.
    """
    conn.begin()
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM orders")  # the caller's own read: its snapshot starts here
    elsewhere = client.submit("billing", "invoice.send", {"order": 7}, idempotency_key="order-7")
    assert elsewhere["created"] is True
    mine = client.submit("billing", "invoice.send", {"order": 7}, connection=conn, idempotency_key="order-7")
    assert (mine["task_id"], mine["created"]) == (elsewhere["task_id"], False)
    conn.commit()


@pytest.mark.parametrize("options", [{"retry_uncertain": "no"}, {"idempotency_key": "order-\ud800"}])
def test_a_refused_submit_leaves_the_callers_transaction_going(client: Client, conn, options):
    """Bad options are InvalidRequest before the caller's connection is used, not a driver's error mid-transaction."""
    conn.begin()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO orders (id, task_id) VALUES (7, NULL)")
    with pytest.raises(InvalidRequest):
        client.submit("billing", "invoice.send", {"order": 7}, connection=conn, **options)
    conn.commit()
    with conn.cursor() as cur:
        cur.execute("SELECT id FROM orders")
        assert cur.fetchall() == ((7,),)
    assert client.list()["tasks"] == []


def test_a_known_key_on_a_dict_cursor_connection_returns_its_task(client: Client, db):
    """A caller whose connection makes dict rows (``cursorclass=DictCursor``, common in applications):
    a known key re-submitted in its transaction returns the existing task, as on any connection, not a
    KeyError from reading the found row by position."""
    conn = pymysql.connect(**db.connect_kwargs(), cursorclass=pymysql.cursors.DictCursor)
    try:
        conn.begin()
        first = client.submit("billing", "invoice.send", {"order": 8}, connection=conn, idempotency_key="order-8")
        conn.commit()
        conn.begin()
        again = client.submit("billing", "invoice.send", {"order": 8}, connection=conn, idempotency_key="order-8")
        conn.commit()
        assert (again["task_id"], again["created"]) == (first["task_id"], False)
        with conn.cursor() as cur:  # the caller's own cursors still make its kind of rows
            cur.execute("SELECT 1 AS one")
            assert cur.fetchone() == {"one": 1}
    finally:
        conn.close()
