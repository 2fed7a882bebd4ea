"""Handler tasks kept between leases, so a lease costs a hand-off instead of a new task.

:meth:`HandlerPool.run` hands a job (a lease runner's handler call) to a
task that waits idle, or starts a new task when every one is busy: a
handler never waits for a free task, whatever the worker's capacity or the
number of leases still winding down. A task that finishes its job waits
for the next one if fewer than ``size`` wait already (``size`` follows the
worker's capacity, :meth:`resize`), else it ends.

Each job runs in a fresh copy of the pool's context (:func:`in_context`),
so a context variable a handler sets (a tracing span, a log correlation
id) is never seen by the next handler of the same task, just as if it had a
task of its own.

The hand-off on asyncio (the default backend) is a bare future: an AnyIO
event or memory stream per hand-off would cost about as much as the task
it saves there. Other backends (Trio) use an AnyIO event: the SDK never
imports Trio itself.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

import anyio.abc
import sniffio

Job = Callable[[], Coroutine[Any, Any, object]]


@types.coroutine
def in_context(context: contextvars.Context, coro: Coroutine[Any, Any, Any]) -> Generator[Any, Any, Any]:
    """Await ``coro`` with each of its steps run in ``context`` (what a task of its own would give it)."""
    run, send, throw = context.run, coro.send, coro.throw
    try:
        signal = run(send, None)
        while True:
            try:
                value = yield signal
            except BaseException as exc:  # cancellation, GeneratorExit: the coroutine handles them itself
                signal = run(throw, exc)
            else:
                signal = run(send, value)
    except StopIteration as stop:
        return stop.value


class _AsyncioParked:
    """An idle task on asyncio: waits on a future (of the running loop) that the hand-off completes."""

    __slots__ = ("future",)

    def __init__(self, future: Any) -> None:
        self.future = future

    def wake(self, job: Job | None) -> bool:
        if self.future.done():  # the task was cancelled meanwhile
            return False
        self.future.set_result(job)
        return True

    def wait(self) -> Awaitable[Job | None]:
        return self.future


class _EventParked:
    """An idle task on any other backend (Trio): waits on an AnyIO event that the hand-off sets.

    The SDK never imports Trio itself, so Trio gets AnyIO's event; a
    hand-off that reaches a task whose wait was cancelled meanwhile is
    handed on by :meth:`HandlerPool._serve`, never lost.
    """

    __slots__ = ("event", "job", "gone")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.job: Job | None = None
        self.gone = False

    def wake(self, job: Job | None) -> bool:
        if self.gone:
            return False
        self.gone = True
        self.job = job
        self.event.set()
        return True

    async def wait(self) -> Job | None:
        await self.event.wait()
        return self.job


class HandlerPool:
    """Tasks in the worker's task group that run handler jobs one after another."""

    def __init__(self, size: int) -> None:
        self.size = size  # idle tasks kept
        self.tasks = 0  # live tasks, busy or idle
        self.started = 0  # tasks ever started (what the pool saves shows against the jobs run)
        self.jobs = 0
        self._idle: list[_AsyncioParked | _EventParked] = []
        self._group: anyio.abc.TaskGroup | None = None
        self._parked: Callable[[], _AsyncioParked | _EventParked] = _EventParked

    @property
    def idle(self) -> int:
        return len(self._idle)

    def attach(self, group: anyio.abc.TaskGroup | None) -> None:
        """Start tasks in ``group`` from now on (None: the worker stopped); called in the event loop."""
        self._group = group
        self._idle.clear()
        if group is not None:
            self._parked = _EventParked
            if sniffio.current_async_library() == "asyncio":
                import asyncio

                new_future = asyncio.get_running_loop().create_future
                self._parked = lambda: _AsyncioParked(new_future())

    def run(self, job: Job) -> None:
        """Run ``job`` in an idle task, or in a new one when none is idle; never waits."""
        self.jobs += 1
        idle = self._idle
        while idle:
            if idle.pop().wake(job):
                return
        assert self._group is not None, "the pool is not attached to a running worker"
        self.tasks += 1
        self.started += 1
        self._group.start_soon(self._serve, job)

    def resize(self, size: int) -> None:
        """Keep at most ``size`` idle tasks from now on; the extra ones end now."""
        self.size = size
        idle = self._idle
        while len(idle) > size:
            idle.pop(0).wake(None)

    async def _serve(self, job: Job | None) -> None:
        try:
            while job is not None:
                await in_context(contextvars.copy_context(), job())
                if len(self._idle) >= self.size:
                    return
                parked = self._parked()
                self._idle.append(parked)
                try:
                    job = await parked.wait()
                except BaseException:
                    if type(parked) is _EventParked:  # (a cancelled asyncio future refuses hand-offs itself)
                        if not parked.gone:
                            parked.gone = True  # no hand-off reaches it from now on
                        elif parked.job is not None:
                            self.run(parked.job)  # woken and cancelled at once: the job goes to another task
                    raise
        finally:
            self.tasks -= 1
