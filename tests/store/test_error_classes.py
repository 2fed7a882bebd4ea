"""Which failures the facade runs again, and how (failures.classify), on the suite's real MariaDB.

The cluster-only answers (1047, 1180, certification failures) are raised by a
real Galera cluster in tests/galera; here they are raised by the function
itself, to pin down what the facade does with each class.
"""

from __future__ import annotations

import pymysql
import pytest

from pulse_trio.store import StoreUnavailable
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.failures import CONFLICT, LOST, classify, node_answered
from pulse_trio.store.engine.registry import read_only


@pytest.mark.parametrize("error, kind", [
    (pymysql.err.OperationalError(1213, "Deadlock found"), CONFLICT),
    (pymysql.err.OperationalError(1205, "Lock wait timeout exceeded"), CONFLICT),
    (pymysql.err.OperationalError(1047, "WSREP has not yet prepared node for application use"), LOST),
    (pymysql.err.OperationalError(1180, "Got error 6 \"No such device or address\" during COMMIT"), LOST),
    (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"), LOST),
    (pymysql.err.InterfaceError(0, ""), LOST),
    (pymysql.err.IntegrityError(1062, "Duplicate entry"), None),
    (pymysql.err.ProgrammingError(1064, "syntax"), None),
])
def test_classify(error, kind):
    assert classify(error) == kind


@pytest.mark.parametrize("error, up", [
    (pymysql.err.OperationalError(1040, "Too many connections"), True),
    (pymysql.err.OperationalError(1226, "User 'u' has exceeded the 'max_user_connections' resource"), True),
    (pymysql.err.OperationalError(1045, "Access denied"), True),
    (pymysql.err.OperationalError(2003, "Can't connect"), False),
    (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query (timed out)"), False),
    (pymysql.err.OperationalError(1047, "WSREP has not yet prepared node for application use"), False),
    (pymysql.err.OperationalError(1053, "Server shutdown in progress"), False),
    (pymysql.err.InternalError("Packet sequence number wrong - got 9 expected 1"), False),
])
def test_a_login_refused_by_the_node_itself_means_it_is_up(error, up):
    """What the writer choice reads from a failed probe: only an unreachable, silent or not-ready node moves it."""
    assert node_answered(error) is up


def test_a_node_that_is_not_ready_costs_its_connection_and_a_retry(db):
    store = Store(db, pool_size=1, backoff_s=0.0001)
    calls = []

    @read_only
    def not_ready_once(tx):
        calls.append(1)
        if len(calls) == 1:
            raise pymysql.err.OperationalError(1047, "WSREP has not yet prepared node for application use")
        return tx.one("SELECT 1")[0]

    try:
        assert store.run_sync(not_ready_once) == 1
        assert len(calls) == 2 and store.pool.discarded == 1, "dropped, not returned to the pool"
        assert store.statistics().recoveries == 0, "nothing was being committed"
    finally:
        store.close()


def test_not_ready_for_ever_gives_up_like_any_outage(db):
    store = Store(db, pool_size=1, max_attempts=3, backoff_s=0.0001)

    @read_only
    def never_ready(tx):
        raise pymysql.err.OperationalError(1047, "WSREP has not yet prepared node for application use")

    try:
        with pytest.raises(StoreUnavailable, match="1047"):
            store.run_sync(never_ready)
    finally:
        store.close()
