"""Handlers by (queue, kind): what a worker can do, and so what it subscribes to.

The registry is plain data built at import time (``@registry.handler``), so
``pulse-trio worker run module:registry`` can load it by name and the
worker's subscriptions follow from it: a worker never subscribes to a
kind it has no handler for, and so is never offered one.

One decorator serves both colours of function: an ``async def`` handler
runs on the worker's own event loop (asyncio or Trio), a plain ``def``
handler in a worker thread (so it never blocks the loop). A handler takes
``(task)`` or ``(task, payload)``; the payload parameter's annotation is
the type the payload is decoded into before the call (see ``payload``).

This is public API (``Registry``, ``Handler`` and their fields): other
tools (the pytest plugin, ``pulse_trio.testing``) build on it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from pulse_trio.contract import grammar as g
from pulse_trio.contract import limits as lim
from pulse_trio.contract.messages import Subscription
from pulse_trio.sdk.payload import Decoder, payload_decoder

@dataclasses.dataclass(frozen=True, slots=True)
class Handler:
    """One registered handler; ``sync`` ones (plain ``def``) run in a worker thread.

    ``takes_payload``: ``fn`` is called as ``fn(task, payload)``, the payload
    decoded by ``decode`` (from the payload's JSON text; it raises
    ``InvalidPayload``). Otherwise ``fn(task)``.
    """

    queue: str
    kind: str
    fn: Callable[..., Any]
    sync: bool = False
    takes_payload: bool = False
    decode: Decoder | None = None

    @property
    def name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))


class Registry:
    """Handlers keyed by (queue, kind).

    ::

        registry = Registry()

        @registry.handler("billing", "invoice.send")
        async def send_invoice(task: TaskContext) -> dict:
            ...

        @registry.handler("billing", "invoice.render")
        def render(task: TaskContext, invoice: Invoice) -> dict:   # runs in a worker thread
            ...
    """

    def __init__(self) -> None:
        self._handlers: dict[tuple[str, str], Handler] = {}

    def handler(self, queue: str, kind: str, *, sync: bool | None = None) -> Callable[[Callable], Callable]:
        """Decorator: register ``fn`` for (queue, kind); returns ``fn`` unchanged.

        ``sync`` need not be given: ``def`` functions run in a thread and
        ``async def`` ones on the loop. Given, it must match the function.
        """

        def register(fn: Callable) -> Callable:
            self.add(queue, kind, fn, sync=sync)
            return fn

        return register

    def add(self, queue: str, kind: str, fn: Callable[..., Any], *, sync: bool | None = None) -> Handler:
        """Register without a decorator; refuses duplicates and a ``sync`` that contradicts the function."""
        if not g.is_queue(queue):
            raise ValueError(f"queue names are {g.NAME_PATTERN}, got {queue!r}")
        if not g.is_kind(kind):
            raise ValueError(f"kind names are {g.NAME_PATTERN}, got {kind!r}")
        if (queue, kind) in self._handlers:
            raise ValueError(f"a handler for {queue}/{kind} is already registered")
        is_async = inspect.iscoroutinefunction(fn)
        if sync is True and is_async:
            raise TypeError(f"{fn!r} is async; register it without sync=True")
        if sync is False and not is_async:
            raise TypeError(f"{fn!r} is not async; register it without sync=False to run it in a thread")
        if not callable(fn):
            raise TypeError(f"{fn!r} is not callable")
        decode, takes_payload = payload_decoder(fn)
        if queue not in {q for q, _ in self._handlers} and len(self.queues()) >= lim.MAX_SUBSCRIPTIONS:
            raise ValueError(f"a worker subscribes to at most {lim.MAX_SUBSCRIPTIONS} queues")
        if sum(1 for q, _ in self._handlers if q == queue) >= lim.MAX_KINDS:
            raise ValueError(f"a worker handles at most {lim.MAX_KINDS} kinds per queue")
        entry = Handler(queue, kind, fn, not is_async, takes_payload, decode)
        self._handlers[(queue, kind)] = entry
        return entry

    def get(self, queue: str, kind: str) -> Handler | None:
        return self._handlers.get((queue, kind))

    def queues(self) -> list[str]:
        return sorted({q for q, _ in self._handlers})

    def subscriptions(self) -> tuple[Subscription, ...]:
        """One subscription per queue, naming exactly the registered kinds."""
        return tuple(
            Subscription(queue, tuple(sorted(k for q, k in self._handlers if q == queue)))
            for queue in self.queues()
        )

    def __iter__(self) -> Iterator[Handler]:
        return iter(list(self._handlers.values()))

    def __len__(self) -> int:
        return len(self._handlers)
