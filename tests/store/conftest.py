"""Store test helpers: a Store on the per-test clean database and a small driver.

Time never comes from the wall clock: ``World.now`` starts at T0 and tests
move it with ``world.advance(ms)``, passing it to every function as ``now``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from pulse_trio.dburl import DatabaseConfig, connect
from pulse_trio.store import (
    FinishCommand, FinishReport, LeaseCommand, NewInstance, NewTask, Refusal, RenewCommand, ResumeRequest, StartCommand,
    SubscribedQueue, assign,
    finish, get_task, new_credentials, register, renew, set_capacity, start, submit,
)
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.results import Offer, Registered

T0 = dt.datetime(2026, 12, 2, 12, 0, 0, tzinfo=dt.timezone.utc)
START_TIMEOUT_MS = 30_000
LEASE_TTL_MS = 30_000


@pytest.fixture
def store(db: DatabaseConfig) -> Iterator[Store]:
    s = Store(db, pool_size=4)
    try:
        yield s
    finally:
        s.close()


@dataclasses.dataclass
class Worker:
    """A registered session as a test sees it."""

    registered: Registered

    @property
    def session_id(self) -> str:
        return self.registered.instance.session_id

    @property
    def instance_id(self) -> str:
        return self.registered.instance.instance_id

    @property
    def secret(self) -> str:
        return self.registered.instance_secret

    @property
    def epoch(self) -> int:
        return self.registered.instance.epoch


class World:
    def __init__(self, store: Store, db: DatabaseConfig) -> None:
        self.store = store
        self.db = db
        self.now = T0
        self._sequence = 0
        self._conn = None  # one inspection connection, kept: a connect per query would be slow

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def advance(self, ms: float) -> dt.datetime:
        self.now = self.now + dt.timedelta(milliseconds=ms)
        return self.now

    def run(self, fn, **kwargs: Any) -> Any:
        kwargs.setdefault("now", self.now)
        return self.store.run_sync(fn, **kwargs)

    # -- workers ------------------------------------------------------------
    def worker(self, *queues: str, capacity: int = 10, keys: bool = False, notify: bool = False,
               kinds: dict[str, list[str]] | None = None) -> Worker:
        subs = tuple(SubscribedQueue(q, frozenset(kinds[q]) if kinds and q in kinds else None) for q in (queues or ("q",)))
        reg = self.run(register, instance=NewInstance("w", subs, cancellation_notifications=notify,
                                                      concurrency_keys=keys))
        assert not isinstance(reg, Refusal), reg
        w = Worker(reg)
        if capacity:
            self.capacity(w, capacity)
        return w

    def capacity(self, w: Worker, capacity: int, drain: bool = False):
        self._sequence += 1
        return self.run(set_capacity, session_id=w.session_id, sequence=self._sequence, capacity=capacity,
                        drain=drain)

    # -- tasks ------------------------------------------------------------------
    def submit(self, queue: str = "q", kind: str = "k", **fields: Any) -> str:
        (result,) = self.run(submit, tasks=[NewTask(queue, kind, **fields)])
        return result.task_id

    def assign(self, w: Worker, n: int = 1, **kwargs: Any) -> tuple[Offer, ...]:
        kwargs.setdefault("start_timeout_ms", START_TIMEOUT_MS)
        kwargs.setdefault("default_lease_ttl_ms", LEASE_TTL_MS)
        result = self.run(assign, session_id=w.session_id, credentials=new_credentials(n), **kwargs)
        assert not isinstance(result, Refusal), result
        return result.offers

    def offer(self, w: Worker, **task_fields: Any) -> Offer:
        task_id = self.submit(**task_fields)
        offers = self.assign(w)
        assert [o.task.task_id for o in offers] == [task_id]
        return offers[0]

    def command(self, w: Worker, offer: Offer, revision: int, *, kind: type[LeaseCommand] = StartCommand,
                report: FinishReport | None = None, secret: str | None = None,
                task_id: str | None = None) -> LeaseCommand:
        """A lease command of ``offer``'s lease (a FinishCommand when ``report`` is given)."""
        fields = (w.session_id, task_id or offer.task.task_id, offer.lease.lease_id,
                  secret if secret is not None else offer.lease_secret, revision)
        return FinishCommand(*fields, report) if report is not None else kind(*fields)

    def start(self, w: Worker, offer: Offer, revision: int = 1, **kw: Any):
        return self.run(start, commands=[self.command(w, offer, revision, **kw)])[0]

    def renew(self, w: Worker, offer: Offer, revision: int, **kw: Any):
        return self.run(renew, commands=[self.command(w, offer, revision, kind=RenewCommand, **kw)])[0]

    def finish(self, w: Worker, offer: Offer, revision: int, status: str = "SUCCEEDED", result: str = '{"ok":1}',
               error_code: str | None = None, retryable: bool = False, **kw: Any):
        if status != "SUCCEEDED" and error_code is None:
            error_code = "boom"
        report = FinishReport(status, result, error_code, None, retryable)
        return self.run(finish, commands=[self.command(w, offer, revision, report=report, **kw)])[0]

    def running(self, w: Worker, **task_fields: Any) -> Offer:
        offer = self.offer(w, **task_fields)
        result = self.start(w, offer)
        assert not isinstance(result, Refusal), result
        return offer

    def resume_request(self, new: Worker, old: Worker, offer: Offer, **overrides: Any) -> ResumeRequest:
        fields = dict(session_id=new.session_id, instance_id=old.instance_id, instance_secret=old.secret,
                      task_id=offer.task.task_id, lease_id=offer.lease.lease_id, lease_secret=offer.lease_secret)
        fields.update(overrides)
        return ResumeRequest(**fields)

    def task(self, task_id: str):
        return self.store.run_sync(get_task, task_id=task_id)

    def setting(self, name: str, ms: int | None) -> None:
        """Change a cluster setting, as `pulse-trio settings set` would."""
        from pulse_trio.store.cluster_setting.settings import set_values

        result = self.run(set_values, values={name: ms}, updated_by="test")
        assert not isinstance(result, Refusal), result

    def sql(self, query: str, args: Any = ()) -> list[tuple]:
        """Inspect (or poke) the database outside the store, on a committed view."""
        if self._conn is None:
            self._conn = connect(self.db)
        with self._conn.cursor() as cur:
            cur.execute(query, args)
            rows = list(cur.fetchall())
        self._conn.commit()
        return rows


@pytest.fixture
def world(store: Store, db: DatabaseConfig) -> Iterator[World]:
    w = World(store, db)
    try:
        yield w
    finally:
        w.close()
