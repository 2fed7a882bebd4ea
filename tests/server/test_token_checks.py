"""The handshake's token check: connections presenting one token at once share its lookup, and nothing is kept."""

from __future__ import annotations

import threading

import trio
import trio.testing

from pulse_trio.server.token_checks import TokenChecks
from pulse_trio.store.engine.trio_bridge import Store


async def _all_at_once(checks: TokenChecks, tokens: list[str]) -> list:
    answers: list = [None] * len(tokens)

    async def one(i: int, token: str) -> None:
        answers[i] = ("answer", await checks.check(token))

    async with trio.open_nursery() as nursery:
        for i, token in enumerate(tokens):
            nursery.start_soon(one, i, token)
    return [a[1] for a in answers]


async def test_one_lookup_per_token_under_way_and_each_its_own_answer(db, token_factory):
    store = Store(db, pool_size=2)
    try:
        checks = TokenChecks(store)
        worker, other_worker = token_factory("worker", ["billing"]), token_factory("worker", ["mail"])
        producer = token_factory("producer", ["billing"])
        tokens = [worker] * 20 + [other_worker] * 5 + [producer] * 3 + ["pt_" + "x" * 43] * 2
        answers = await _all_at_once(checks, tokens)
        assert checks.lookups == 4 and checks.shared == len(tokens) - 4
        assert {a.queues for a in answers[:20]} == {("billing",)}
        assert {a.queues for a in answers[20:25]} == {("mail",)}
        # a producer token does not open a worker session; nor does a stranger; each says why (the refusals' metric)
        assert answers[25:] == ["other_role"] * 3 + ["unknown_token"] * 2
    finally:
        store.close()


async def test_nothing_is_kept_after_the_answer(db, token_factory, revoke):
    store = Store(db, pool_size=2)
    try:
        checks = TokenChecks(store)
        token = token_factory("worker", ["billing"])
        assert await checks.check(token) is not None
        revoke(token)
        assert await checks.check(token) == "revoked_token"
        assert checks.lookups == 2 and checks.shared == 0
    finally:
        store.close()


class _TellingStore(Store):
    """The real store, which also says from its thread when a transaction has its answer, before Trio hears it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.answered = threading.Event()

    def run_sync(self, fn, /, **kwargs):
        try:
            return super().run_sync(fn, **kwargs)
        finally:
            self.answered.set()


async def test_a_check_that_comes_after_a_revoke_does_not_take_a_lookup_started_before_it(db, token_factory, revoke):
    """docs/operations.md §1.4: a revoke refuses the token's next connection at once. A handshake that
    arrives once the revoke has committed, while a lookup that read the token live is still on its way
    back, waits for a lookup of its own instead of taking that one's stale answer."""
    store = _TellingStore(db, pool_size=2)
    try:
        checks = TokenChecks(store)
        token = token_factory("worker", ["billing"])
        earlier: list = []

        async def before_the_revoke() -> None:
            earlier.append(await checks.check(token))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(before_the_revoke)
            await trio.testing.wait_all_tasks_blocked()  # its lookup is in a store thread
            assert store.answered.wait(10)  # it has read the token live; Trio does not run it until we yield
            revoke(token)
            assert await checks.check(token) == "revoked_token"
        assert earlier[0] is not None and earlier[0].queues == ("billing",)
        assert checks.lookups == 2 and checks.shared == 0
    finally:
        store.close()


async def test_only_answers_are_shared_a_failed_lookup_is_each_waiters_own(db, token_factory):
    """The database refuses (here: the store is closed): every waiter tries, and fails, by itself."""
    store = Store(db, pool_size=2)
    checks = TokenChecks(store)
    token = token_factory("worker", ["billing"])
    store.close()
    failures: list[BaseException] = []

    async def one() -> None:
        try:
            await checks.check(token)
        except Exception as exc:  # noqa: BLE001 (what each caller saw)
            failures.append(exc)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(one)
    assert len(failures) == 3
    assert checks.lookups == 3 and checks.shared == 0
