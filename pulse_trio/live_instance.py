"""What only the running serve process can do, as the HTTP API beside it sees it.

The HTTP API reads and writes through the producer client and the store,
like any producer. This Protocol is the rest: the few things that need
the live instance in the same process. ``pulse_trio.server`` implements it
(``server/live.py``), ``pulse_trio.http`` uses it, and ``pulse_trio.serve``
hands the one to the other: neither package imports the other.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any, Protocol


class LiveInstance(Protocol):
    def now(self) -> dt.datetime:
        """The instance's clock (a virtual one in scenario tests): the ``now`` of every write."""

    def wake_dispatcher(self) -> None:
        """New work was committed: ask this instance's dispatcher for a pass now, not at its next poll."""

    def drain_hint(self, session_id: str) -> None:
        """An operator drained this session: if it lives here, stop offering to it now, not at the next refusal."""

    def offer_revoked(self, session_id: str, lease_id: str) -> None:
        """A cancel revoked this session's offer: if it lives here, its slot is free now, not at reconciliation."""

    def on_task_ended(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(task_id)`` (in the Trio thread) when this process ends a task's attempt.

        A hint, never the only word: the task may not be terminal (a retry was
        scheduled), and tasks ended by another process are not reported here.
        """

    async def refresh_settings(self) -> None:
        """Read the cluster settings again after a change (the other instances do within their interval)."""

    async def refresh_paused_queues(self) -> None:
        """Read the paused queues again after a pause or resume (the other instances do within their interval)."""

    def settings_conflicts(self) -> list[dict[str, object]]:
        """This instance's cluster-setting flags that disagree with the cluster (``/readyz``)."""

    def count_http(self, method: str, route: str, status: int) -> None:
        """One HTTP request answered (the instance's metrics)."""

    def count_http_error(self, code: str) -> None:
        """One HTTP error answered, by its code."""

    def process_metrics(self) -> bytes:
        """This process's own series in the Prometheus text format (a serve group sums them across its members)."""

    def database_metrics(self, queues: Mapping[str, Mapping[str, Any]] | None) -> tuple[bytes, str]:
        """The series of what this scrape read from the database, and the format's media type.

        ``queues``: the queue depths this scrape read, None if the database did not answer.
        """
