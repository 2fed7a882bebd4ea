"""Hellos and capacity frames queued together share one transaction, each with its own answer.

Registrations take no cluster-wide row (the epoch is the insert's
AUTO_INCREMENT), so registrations from many connections can run side by
side and even commit together. The requests are queued before the lanes
start, so the first lane takes them all in one batch.
"""

from __future__ import annotations

import datetime as dt

import trio
import trio.testing

from pulse_trio.dburl import connect
from pulse_trio.server.registrations import SessionRequests
from pulse_trio.store import NewInstance, Refusal, SubscribedQueue, register, set_capacity
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.writer import connect as db_connect
from pulse_trio.store.instance.instances import TOKEN_LIVE
from pulse_trio.store.token.tokens import authenticate

NOW = dt.datetime(2026, 12, 2, 12, 0, 0, tzinfo=dt.timezone.utc)


def _hello(name: str, queue: str = "billing", token_id: str | None = None) -> NewInstance:
    return NewInstance(name, (SubscribedQueue(queue),), token_id=token_id)


def _token_id(db, token: str) -> str:
    conn = db_connect(db)
    try:
        return authenticate(conn, token).token_id
    finally:
        conn.close()


async def _all_at_once(requests: SessionRequests, calls: list) -> list:
    """Queue every call, then let the lanes run: the answers, in order."""
    answers: list = [None] * len(calls)

    async def one(i: int, fn, kwargs) -> None:
        try:
            answers[i] = await requests.call(fn, **kwargs)
        except Exception as exc:  # noqa: BLE001 (reported as the answer)
            answers[i] = exc

    async with trio.open_nursery() as nursery:
        for i, (fn, kwargs) in enumerate(calls):
            nursery.start_soon(one, i, fn, kwargs)
        await trio.testing.wait_all_tasks_blocked()
        lanes = trio.CancelScope()

        async def run_lanes() -> None:
            with lanes:
                await requests.run()

        nursery.start_soon(run_lanes)
        with trio.fail_after(10):
            while any(a is None for a in answers):
                await trio.sleep(0.01)
        lanes.cancel()
    return answers


async def test_queued_registrations_share_one_transaction_and_keep_their_own_answers(db):
    store = Store(db, pool_size=2)
    try:
        requests = SessionRequests(store)
        calls = [(register, {"instance": _hello(f"w{i}"), "now": NOW}) for i in range(12)]
        calls.append((register, {"instance": _hello("denied", "other"), "now": NOW, "allowed_queues": {"billing"}}))
        answers = await _all_at_once(requests, calls)
        assert requests.statistics()["batches"] == 1 and requests.statistics()["requests"] == 13
        *welcomed, denied = answers
        assert isinstance(denied, Refusal) and denied.code == "permission_denied"
        epochs = [a.instance.epoch for a in welcomed]
        assert len(set(epochs)) == 12
        assert len({a.instance.session_id for a in welcomed}) == 12

        # Each session's capacity frame, again together: every one applied to its own session.
        calls = [(set_capacity, {"session_id": a.instance.session_id, "sequence": 1, "capacity": i + 1,
                                 "drain": False, "now": NOW}) for i, a in enumerate(welcomed)]
        calls.insert(3, (register, {"instance": _hello("late"), "now": NOW}))
        answers = await _all_at_once(requests, calls)
        assert requests.statistics()["batches"] == 2
        late = answers.pop(3)
        assert late.instance.epoch > max(epochs)
        assert [a.instance.capacity for a in answers] == list(range(1, 13))
        assert all(a.applied for a in answers)
    finally:
        store.close()


async def test_a_batch_refuses_the_hellos_of_a_revoked_token_and_registers_the_others(db, token_factory, revoke):
    """The hellos of one batch share the read of their tokens: each is judged by its own token, so only the
    revoked token's hellos are refused, wherever they stand in the batch."""
    store = Store(db, pool_size=2)
    try:
        requests = SessionRequests(store)
        live, gone = token_factory("worker", ["billing"]), token_factory("worker", ["billing"])
        ids = {"live": _token_id(db, live), "gone": _token_id(db, gone), "none": None}
        revoke(gone)
        order = ["live", "gone", "none", "live", "gone", "live"]
        calls = [(register, {"instance": _hello(f"{which}-{i}", token_id=ids[which]), "now": NOW})
                 for i, which in enumerate(order)]
        answers = await _all_at_once(requests, calls)
        assert requests.statistics()["batches"] == 1
        refused = [which for which, a in zip(order, answers, strict=True) if isinstance(a, Refusal)]
        assert refused == ["gone", "gone"], answers
        assert all(a.guard == TOKEN_LIVE for a in answers if isinstance(a, Refusal))
        conn = connect(db)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT worker_name FROM worker_instances ORDER BY worker_name")
                assert [r[0] for r in cur.fetchall()] == ["live-0", "live-3", "live-5", "none-2"]
        finally:
            conn.close()
    finally:
        store.close()


def _selects(store: Store) -> tuple[int, int]:
    """(connection id, its Com_select) of the one connection of a pool_size=1 store: the server's own count."""
    conn = store.pool.acquire()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            (connection_id,) = cur.fetchone()
            cur.execute("SHOW SESSION STATUS LIKE 'Com_select'")
            count = int(cur.fetchone()[1])
        conn.rollback()
    finally:
        store.pool.release(conn)
    return connection_id, count


async def test_a_batch_of_hellos_reads_their_tokens_with_one_select(db, token_factory):
    """Six hellos with tokens cost their batch one SELECT more than six without: the tokens are read together
    (``LiveTokens``), not once per hello. Counted by MariaDB on the batch's own connection."""
    store = Store(db, pool_size=1)
    try:
        requests = SessionRequests(store)
        one, two = (_token_id(db, token_factory("worker", ["billing"])) for _ in range(2))

        async def selects(tag: str, token_ids: list[str | None]) -> int:
            before = _selects(store)
            calls = [(register, {"instance": _hello(f"{tag}-{i}", token_id=t), "now": NOW})
                     for i, t in enumerate(token_ids)]
            answers = await _all_at_once(requests, calls)
            after = _selects(store)
            assert not any(isinstance(a, (Refusal, Exception)) for a in answers), answers
            assert after[0] == before[0], "the batch ran on the store's one connection"
            return after[1] - before[1]

        without = await selects("none", [None] * 6)
        with_tokens = await selects("token", [one, two, one, two, one, two])
        assert requests.statistics()["batches"] == 2
        assert with_tokens - without == 1, (with_tokens, without)
    finally:
        store.close()


async def test_a_request_cancelled_before_its_batch_never_runs(db):
    store = Store(db, pool_size=2)
    try:
        requests = SessionRequests(store)
        async with trio.open_nursery() as nursery:
            cancelled = trio.CancelScope()

            async def doomed() -> None:
                with cancelled:
                    await requests.call(register, instance=_hello("gone"), now=NOW)

            nursery.start_soon(doomed)
            await trio.testing.wait_all_tasks_blocked()
            cancelled.cancel()
        assert requests.statistics()["queued"] == 0
        answers = await _all_at_once(requests, [(register, {"instance": _hello("kept"), "now": NOW})])
        assert not isinstance(answers[0], BaseException)
        conn = connect(db)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT worker_name FROM worker_instances")
                assert cur.fetchall() == (("kept",),)
        finally:
            conn.close()
    finally:
        store.close()
