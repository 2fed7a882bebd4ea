"""One handler, one attempt, a lease the test drives: the worker's own call path without a server.

The handler is called by the same code the worker uses (payload decoding,
``def`` handlers in a worker thread, exceptions mapped to the finish the
worker would send), with a real :class:`~pulse_trio.sdk.TaskContext`.
What a server and time would do to the attempt, the test does instead:

* ``advance(seconds)`` moves the context's clock (``task.time_left()``);
  while renewals succeed the lease is renewed as the worker would renew it
  (a third of the way to the expiry), so time left never runs out;
* ``fail_renewals()``: renewals fail from now on (a partition, an outage),
  so advancing past the expiry loses the lease: the handler is stopped as
  the worker's watchdog would stop it, and nothing is finished;
* ``cancel(reason)``: a cancel request (a ``task.cancel`` push, or a
  renewal showing it): an ``async def`` handler is cancelled at its next
  ``await``; a ``def`` handler sees ``check_cancelled()`` raise;
* ``lose_lease(reason)``: the service says the lease is gone.

Drive these while the handler runs from a task beside ``run()``::

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(env.run, "billing", "slow", {})
        await env.wait_called()
        env.cancel("customer asked")
    assert env.finished.status == "CANCELLED"
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread

from pulse_trio.contract.grammar import new_id
from pulse_trio.contract.jsontext import JsonText
from pulse_trio.contract.limits import MAX_PAYLOAD_DEPTH, MAX_RESULT_BYTES
from pulse_trio.contract.messages import AssignedTask
from pulse_trio.sdk.context import CANCEL_REQUESTED, LEASE_LOST, TaskContext
from pulse_trio.sdk.invoke import call_handler
from pulse_trio.sdk.registry import Handler, Registry

#: Queue and kind given to a handler tested on its own (not through a registry).
DEFAULT_QUEUE, DEFAULT_KIND = "tests", "handler"
#: The worker renews once a third of the time to the expiry has passed (see pulse_trio.sdk.lease).
RENEW_AT_FRACTION = 1 / 3


class TestClock:
    """A clock that moves only when told: ``clock()`` is the time, ``advance(seconds)`` moves it."""

    __test__ = False  # not a pytest test class

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()  # a handler thread may read it while the test advances it

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward; NaN or infinity would leave it no time to tell, so they are refused too."""
        if not 0 <= seconds < math.inf:
            raise ValueError(f"time only moves forward, by a finite number of seconds (not {seconds!r})")
        with self._lock:
            self._now += seconds


@dataclasses.dataclass(frozen=True, slots=True)
class Finished:
    """What the attempt came to: the ``task.finish`` the worker would send, or a lost lease (none).

    ``status`` is SUCCEEDED, FAILED, UNKNOWN or CANCELLED, or LEASE_LOST when
    nothing would be finished; ``result`` is the finish's result as Python
    values (the handler's return value after JSON encoding, or the raised
    outcome's ``details``).
    """

    status: str
    result: Any = None
    error_code: str = ""
    error_message: str = ""
    retryable: bool = False
    handler_called: bool = False
    renewals: int = 0

    @property
    def lease_lost(self) -> bool:
        return self.status == "LEASE_LOST"


class _Attempt:
    """One run of the handler as ``wait_called`` sees it: its context, whether the handler was called, how it ended."""

    def __init__(self) -> None:
        self.context: TaskContext | None = None
        self.called = False
        self.finished: Finished | None = None  # once ended: how, unless run() itself raised
        #: Set once the handler is called or the attempt ends without calling it: either answers ``wait_called``.
        self.settled = anyio.Event()

    def mark_called(self) -> None:
        self.called = True
        self.settled.set()

    def mark_ended(self, finished: Finished | None) -> None:
        self.finished = finished
        self.settled.set()


class HandlerEnvironment:
    """Runs one attempt of a handler at a time (see the module docstring).

    ``handlers`` is a :class:`~pulse_trio.sdk.Registry` (``run`` names the
    queue and kind) or one handler function. ``lease_ttl`` is the lease's
    length in seconds on the test's :class:`TestClock`.
    """

    def __init__(self, handlers: Registry | Callable[..., Any], *, lease_ttl: float = 30.0,
                 max_result_bytes: int = MAX_RESULT_BYTES, clock: TestClock | None = None) -> None:
        if isinstance(handlers, Registry):
            self.registry = handlers
        else:
            self.registry = Registry()
            self.registry.add(DEFAULT_QUEUE, DEFAULT_KIND, handlers)
        if not lease_ttl > 0:
            raise ValueError("lease_ttl must be a positive number of seconds")
        self.lease_ttl = lease_ttl
        self.max_result_bytes = max_result_bytes
        self.clock = clock or TestClock()
        #: The running (or last) attempt's context, and how it finished.
        self.context: TaskContext | None = None
        self.finished: Finished | None = None
        self.renewals = 0
        self._failing = False
        self._scope: anyio.CancelScope | None = None
        # The attempt running now, and the next one when a ``wait_called`` is waiting for it to start.
        self._running: _Attempt | None = None
        self._next: _Attempt | None = None

    # -- the attempt ---------------------------------------------------------------
    async def run(self, queue: str = DEFAULT_QUEUE, kind: str = DEFAULT_KIND, payload: Any = None, *,
                  payload_json: str | None = None, attempt: int = 1, max_attempts: int = 3,
                  idempotency_key: str | None = None, effect_uncertain: bool = False,
                  concurrency_key: str | None = None, concurrency_token: int | None = None,
                  priority: int = 0, retry_of: str | None = None, task_id: str | None = None) -> Finished:
        """Call the handler for (queue, kind) once with this task; returns (and keeps) how it finished.

        ``payload`` is encoded as the producer's JSON would be; give
        ``payload_json`` to hand over exact text instead.
        """
        handler = self.registry.get(queue, kind)
        if handler is None:
            raise LookupError(f"no handler for {queue}/{kind} in the registry")
        if self._scope is not None:
            raise RuntimeError("an attempt is already running in this environment")
        now = dt.datetime.now(dt.timezone.utc)
        text = payload_json if payload_json is not None else JsonText.from_value(payload, max_depth=MAX_PAYLOAD_DEPTH)
        task_id = task_id or new_id("tsk_")
        task = AssignedTask(
            task_id=task_id, queue=queue, kind=kind, payload=JsonText.parse(text, max_depth=MAX_PAYLOAD_DEPTH),
            attempt=attempt, max_attempts=max(max_attempts, attempt), idempotency_key=idempotency_key or task_id,
            created_at=now, due_at=now, priority=priority, concurrency_key=concurrency_key,
            concurrency_token=concurrency_token, effect_uncertain=effect_uncertain, retry_of=retry_of)
        ctx = TaskContext(task, new_id("lse_"), clock=self.clock)
        ctx._set_deadline(self.lease_ttl)
        self.context, self.finished, self.renewals = ctx, None, 0  # fail_renewals() holds across attempts
        attempt, self._next = self._next or _Attempt(), None
        attempt.context, self._running, self._scope = ctx, attempt, anyio.CancelScope()
        try:
            outcome = await call_handler(self._observed(handler, attempt), ctx, self._scope, threads=None,
                                         max_result_bytes=self.max_result_bytes)
            called = attempt.called
            if outcome is None or ctx.stop_reason == LEASE_LOST:  # the worker finishes nothing for a lost lease
                self.finished = Finished("LEASE_LOST", None, "", ctx.cancel_reason, handler_called=called,
                                         renewals=self.renewals)
            else:
                self.finished = Finished(outcome.status, json.loads(outcome.result), outcome.error_code,
                                         outcome.error_message, outcome.retryable, called, self.renewals)
        finally:
            self._scope, self._running = None, None
            attempt.mark_ended(self.finished)
        return self.finished

    async def wait_called(self) -> TaskContext:
        """Wait until the handler of the running attempt, or else of the next one, is called; returns its context.

        Tied to that one attempt: an earlier attempt's call never answers it,
        and an attempt that ends without calling the handler (a payload that
        does not fit its type) raises RuntimeError rather than waiting for ever.
        """
        attempt = self._running or self._next
        if attempt is None:
            attempt = self._next = _Attempt()
        await attempt.settled.wait()
        if not attempt.called:
            how = f": {attempt.finished.status} {attempt.finished.error_code}" if attempt.finished is not None else ""
            raise RuntimeError(f"the attempt ended without calling the handler{how}")
        assert attempt.context is not None
        return attempt.context

    @staticmethod
    def _observed(handler: Handler, attempt: _Attempt) -> Handler:
        """The handler, noting on ``attempt`` that it was called (from its worker thread for a ``def`` one)."""
        fn = handler.fn
        if handler.sync:
            def called_sync(*args: Any) -> Any:
                anyio.from_thread.run_sync(attempt.mark_called)  # the attempt's event belongs to the loop
                return fn(*args)
            return dataclasses.replace(handler, fn=called_sync)

        async def called_async(*args: Any) -> Any:
            attempt.mark_called()
            return await fn(*args)
        return dataclasses.replace(handler, fn=called_async)

    # -- what the server and time would do -----------------------------------------------
    def advance(self, seconds: float) -> None:
        """Move the clock; renew as the worker would, or lose the lease once renewals fail past its expiry."""
        self.clock.advance(seconds)
        ctx = self.context
        if ctx is None or ctx.stop_reason is not None:
            return
        if self._failing:
            if ctx.time_left() <= 0:
                self.lose_lease("its expiry passed without a renewal")
            return
        if ctx.time_left() <= self.lease_ttl * (1 - RENEW_AT_FRACTION):
            self.renewals += 1
            ctx._set_deadline(self.lease_ttl)

    def fail_renewals(self, failing: bool = True) -> None:
        """From now on renewals fail: in this attempt, or the next if none runs yet, and later ones.

        ``False``: they succeed again.
        """
        self._failing = failing

    def cancel(self, reason: str = "") -> None:
        """A cancel request reaches the running handler."""
        ctx = self.context
        if ctx is not None and ctx._halt(CANCEL_REQUESTED, reason) and self._scope is not None:
            self._scope.cancel()

    def lose_lease(self, reason: str = "lease_expired") -> None:
        """The lease is gone (expired, moved): the handler is stopped and nothing is finished."""
        ctx = self.context
        if ctx is not None and ctx._halt(LEASE_LOST, reason) and self._scope is not None:
            self._scope.cancel()

