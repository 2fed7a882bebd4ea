"""What a handler is given: the task, and a way to learn it must stop.

A handler must stop for one of two reasons, and the context says which:

* a cancel was requested (``task.cancel`` push, or a renewal showing
  ``cancel_requested_at``): finishing CANCELLED is accepted;
* the lease was lost (expired, moved to another worker): nothing this
  worker reports will be accepted, and another attempt may already run.

For async handlers the SDK cancels the handler's cancel scope, so any
``await`` raises ``trio.Cancelled``. Sync handlers (in a thread) cannot be
interrupted, so they poll ``check_cancelled()``; ``cancel_requested`` is
safe to read from any thread.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import trio

from pulse_trio.contract.messages import AssignedTask
from pulse_trio.sdk.errors import TaskCancelled

CANCEL_REQUESTED = "cancel_requested"
LEASE_LOST = "lease_lost"
_UNREAD = object()


class TaskContext:
    """One attempt of one task, as its handler sees it."""

    def __init__(self, task: AssignedTask, lease_id: str) -> None:
        self._task = task
        self.lease_id = lease_id
        self._payload: Any = _UNREAD
        self._cancelled: trio.Event | None = None
        self._stop = False  # written once, in the Trio thread; a bool is safe to read from any thread
        self.stop_reason: str | None = None  # CANCEL_REQUESTED or LEASE_LOST
        self.cancel_reason: str = ""  # the operator's reason, when a cancel was requested

    @property
    def payload(self) -> Any:
        """The payload as Python values (``json.loads`` of ``payload_json``, read on first use)."""
        if self._payload is _UNREAD:
            self._payload = json.loads(self._task.payload)
        return self._payload

    @property
    def cancelled(self) -> trio.Event:
        """Set (in the Trio thread) once the handler must stop; see ``stop_reason``."""
        event = self._cancelled
        if event is None:
            # Published before the flag is read, so a concurrent ``_halt`` sets it either way.
            event = self._cancelled = trio.Event()
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

    # -- stopping -------------------------------------------------------------
    @property
    def cancel_requested(self) -> bool:
        """Whether the handler must stop (any thread may read this)."""
        return self._stop

    def check_cancelled(self) -> None:
        """Raise ``TaskCancelled`` if the handler must stop; call it often in sync handlers.

        In a handler thread it also raises ``trio.Cancelled`` when the worker
        itself is being stopped hard.
        """
        if self._stop:
            raise TaskCancelled(self.cancel_reason or self.stop_reason or "")
        try:
            trio.from_thread.check_cancelled()
        except RuntimeError:  # not a Trio worker thread: nothing more to check
            pass

    def _halt(self, reason: str, detail: str = "") -> bool:
        """Called by the lease runner in the Trio thread; the first reason wins."""
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
