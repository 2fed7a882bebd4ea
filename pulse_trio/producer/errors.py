"""What the HTTP producer clients raise.

A refusal by the API is a :class:`~pulse_trio.client.ClientError` with the
API's own ``code`` (the same codes as ``docs/http-api.md`` lists), so code
written against the direct-database client catches the same class. A task
that ended badly is a :class:`TaskOutcomeError`, one subclass per terminal
state, carrying the task as the API showed it. Every one pickles as
itself (:class:`~pulse_trio.picklable.ByFields`), so a refusal met in a
process pool's worker reaches the parent unchanged.
"""

from __future__ import annotations

from typing import Any

from pulse_trio.client.producer import ClientError, TaskNotFound
from pulse_trio.picklable import ByFields


class RequestRefused(ClientError):
    """The API answered an error: ``status`` (HTTP), ``code`` (stable), ``message``; ``items`` for a batch."""

    def __init__(self, status: int, code: str, message: str, items: list[dict[str, Any]] | None = None) -> None:
        super().__init__(code, message)
        self.status = status
        #: A refused batch: one entry per refused task (``index``, ``code``, ``field``, ``message``).
        self.items = items or []


class TaskOutcomeError(ByFields, Exception):
    """The task ended without succeeding; ``task`` is its view (attempts and outcome included)."""

    state = ""

    def __init__(self, task: dict[str, Any]) -> None:
        self.task = task
        self.task_id: str = task["task_id"]
        outcome = task.get("outcome") or {}
        self.error_code: str | None = outcome.get("error_code")
        self.error_message: str | None = outcome.get("error_message")
        detail = f": {self.error_code}" if self.error_code else ""
        detail += f" ({self.error_message})" if self.error_message else ""
        super().__init__(f"task {self.task_id} is {self.state}{detail}")


class TaskFailed(TaskOutcomeError):
    """The task is FAILED: its handler refused it, or it ran out of attempts."""

    state = "FAILED"


class TaskUnknown(TaskOutcomeError):
    """The task is UNKNOWN: an attempt may have had its effect, and no more will run (docs/task-recovery.md)."""

    state = "UNKNOWN"


class TaskCancelled(TaskOutcomeError):
    """The task is CANCELLED."""

    state = "CANCELLED"


class WaitTimeout(ByFields, TimeoutError):
    """The wait ran out before the task ended; ``task`` is its view as last seen (it goes on running).

    A wait whose service never answered has seen no view: its ``task`` holds
    ``task_id`` and ``state`` None, and the error is chained from the last
    transport failure or answer of ``UNANSWERED_STATUSES`` (503, or a gateway's 502 or 504).
    """

    def __init__(self, task: dict[str, Any], timeout: float) -> None:
        self.task = task
        self.task_id: str = task["task_id"]
        if task.get("state") is None:
            super().__init__(f"task {self.task_id}: the service did not answer within {timeout:g} s")
        else:
            super().__init__(f"task {self.task_id} is still {task['state']} after {timeout:g} s")

    @classmethod
    def unanswered(cls, task_id: str, timeout: float) -> WaitTimeout:
        """The wait ran out without one answer from the service."""
        return cls({"task_id": task_id, "state": None}, timeout)


#: The error for each terminal state but SUCCEEDED.
OUTCOME_ERRORS: dict[str, type[TaskOutcomeError]] = {e.state: e for e in (TaskFailed, TaskUnknown, TaskCancelled)}

__all__ = ["OUTCOME_ERRORS", "ClientError", "RequestRefused", "TaskCancelled", "TaskFailed", "TaskNotFound",
           "TaskOutcomeError", "TaskUnknown", "WaitTimeout"]
