"""What a handler is given: the task, and a way to learn it must stop.

A handler must stop for one of two reasons, and the context says which:

* a cancel was requested (``task.cancel`` push, or a renewal showing
  ``cancel_requested_at``): finishing CANCELLED is accepted;
* the lease was lost (expired, moved to another worker): nothing this
  worker reports will be accepted, and another attempt may already run.

For ``async def`` handlers the SDK cancels the handler's cancel scope, so
any ``await`` raises the event loop's cancellation (``asyncio.CancelledError``
or ``trio.Cancelled``). ``def`` handlers (in a worker thread) cannot be
interrupted, so they poll ``check_cancelled()``; ``cancel_requested`` and
``time_left()`` are safe to read from any thread.

The lease deadline is kept on a plain monotonic clock (``time.monotonic``
unless a test drives its own, see :mod:`pulse_trio.testing`), not the event
loop's, so a handler thread can read it without touching the loop.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread

from pulse_trio.contract.messages import AssignedTask
from pulse_trio.sdk.errors import TaskCancelled

CANCEL_REQUESTED = "cancel_requested"
LEASE_LOST = "lease_lost"
_UNREAD = object()


class TaskContext:
    """One attempt of one task, as its handler sees it."""

    def __init__(self, task: AssignedTask, lease_id: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._task = task
        self.lease_id = lease_id
        self._payload: Any = _UNREAD
        self._cancelled: anyio.Event | None = None
        self._clock = clock
        self._deadline = math.inf  # the local lease expiry, on ``clock``
        self._stop = False  # written once, in the event loop's thread; a bool is safe to read from any thread
        self.stop_reason: str | None = None  # CANCEL_REQUESTED or LEASE_LOST
        self.cancel_reason: str = ""  # the operator's reason, when a cancel was requested

    @property
    def payload(self) -> Any:
        """The payload as Python values (``json.loads`` of ``payload_json``, read on first use)."""
        if self._payload is _UNREAD:
            self._payload = json.loads(self._task.payload)
        return self._payload

    @property
    def cancelled(self) -> anyio.Event:
        """Set once the handler must stop (see ``stop_reason``); await it from the event loop's thread only."""
        event = self._cancelled
        if event is None:
            # Published before the flag is read, so a concurrent ``_halt`` sets it either way.
            event = self._cancelled = anyio.Event()
            if self._stop:
                event.set()
        return event

    # -- the task -------------------------------------------------------------
    @property
    def task_id(self) -> str:
        return self._task.task_id

    @property
    def queue(self) -> str:
        return self._task.queue

    @property
    def kind(self) -> str:
        return self._task.kind

    @property
    def payload_json(self) -> str:
        """The payload as the exact JSON text the producer submitted (numbers digit for digit)."""
        return str(self._task.payload)

    @property
    def attempt(self) -> int:
        return self._task.attempt

    @property
    def max_attempts(self) -> int:
        return self._task.max_attempts

    @property
    def idempotency_key(self) -> str:
        """The business identity of the effect: check it downstream before acting twice."""
        return self._task.idempotency_key

    @property
    def effect_uncertain(self) -> bool:
        """True when an earlier attempt may have had its effect (lost lease, or a retry of UNKNOWN)."""
        return self._task.effect_uncertain

    @property
    def concurrency_key(self) -> str | None:
        return self._task.concurrency_key

    @property
    def concurrency_token(self) -> int | None:
        """Fencing token of the key permit: pass it downstream so a stale holder can be refused."""
        return self._task.concurrency_token

    @property
    def retry_of(self) -> str | None:
        """The task this one manually retries (same idempotency key), if any."""
        return self._task.retry_of

    @property
    def priority(self) -> int:
        return self._task.priority

    @property
    def created_at(self) -> dt.datetime:
        return self._task.created_at

    @property
    def due_at(self) -> dt.datetime:
        return self._task.due_at

    # -- the lease's time -------------------------------------------------------
    def time_left(self) -> float:
        """Seconds until the local estimate of the lease's expiry (any thread may call it).

        The SDK renews the lease by itself while the handler runs, so this
        only shrinks when renewals fail (a partition, say); a handler about to
        start a long, uninterruptible step can check that it has the time.
        """
        return self._deadline - self._clock()

    def _set_deadline(self, seconds_left: float) -> None:
        self._deadline = self._clock() + seconds_left

    # -- stopping -------------------------------------------------------------
    @property
    def cancel_requested(self) -> bool:
        """Whether the handler must stop (any thread may read this)."""
        return self._stop

    def check_cancelled(self) -> None:
        """Raise ``TaskCancelled`` if the handler must stop; call it often in sync handlers.

        In a handler thread it also raises the event loop's cancellation when
        the worker itself is being stopped hard.
        """
        if self._stop:
            raise TaskCancelled(self.cancel_reason or self.stop_reason or "")
        try:
            anyio.from_thread.check_cancelled()
        except RuntimeError:  # not an AnyIO worker thread: nothing more to check
            pass

    def _halt(self, reason: str, detail: str = "") -> bool:
        """Called by the lease runner in the event loop's thread; the first reason wins."""
        if self.stop_reason is not None:
            return False
        self.stop_reason = reason
        self.cancel_reason = detail
        self._stop = True
        if self._cancelled is not None:
            self._cancelled.set()
        return True

    def __repr__(self) -> str:
        return f"TaskContext({self.task_id} {self.queue}/{self.kind} attempt {self.attempt})"
