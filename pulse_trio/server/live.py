"""The running instance as the HTTP API sees it: :class:`~pulse_trio.live_instance.LiveInstance`.

Built once by ``serve()`` from the parts it names, so the API beside the
service reaches its dispatcher, sessions, settings and metrics only
through these few methods.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.hub import SessionHub
from pulse_trio.server.metrics import CONTENT_TYPE, ServiceMetrics, Snapshot, database_exposition
from pulse_trio.server.queue_sync import PausedQueueSync
from pulse_trio.server.settings_sync import SettingsSync
from pulse_trio.store.engine.facade import SyncStore


class LiveService:
    """This process's worker service, behind the narrow interface the HTTP API uses."""

    def __init__(self, *, clock: ServiceClock, hub: SessionHub, metrics: ServiceMetrics, store: SyncStore,
                 settings_sync: SettingsSync | None, queue_sync: PausedQueueSync | None = None) -> None:
        self._clock = clock
        self._hub = hub
        self._metrics = metrics
        self._store = store
        self._settings_sync = settings_sync
        self._queue_sync = queue_sync

    def now(self) -> dt.datetime:
        return self._clock.now()

    def wake_dispatcher(self) -> None:
        self._hub.wake()
        self._hub.announce()

    def drain_hint(self, session_id: str) -> None:
        """An operator drained the session: when it lives here, it takes no offer from now on.

        Posted to the session's inbox (its own task applies it); the post closes its free slots at once.
        """
        live = self._hub.get(session_id)
        if live is not None:
            live.inbox.drain_hinted()

    def offer_revoked(self, session_id: str, lease_id: str) -> None:
        """A cancel revoked the session's offer: when it lives here, its own task frees the slot.

        Posted as news: the pass that follows fills the slot, however far below its refill mark.
        """
        live = self._hub.get(session_id)
        if live is not None:
            live.inbox.lease_ended(lease_id, news=True)

    def on_task_ended(self, listener: Callable[[str], None]) -> None:
        self._hub.on_task_ended(listener)

    async def refresh_settings(self) -> None:
        if self._settings_sync is not None:
            await self._settings_sync.refresh()

    async def refresh_paused_queues(self) -> None:
        if self._queue_sync is not None:
            await self._queue_sync.refresh()

    def settings_conflicts(self) -> list[dict[str, object]]:
        sync = self._settings_sync
        return [c.as_json() for c in sync.conflicts()] if sync is not None else []

    def count_http(self, method: str, route: str, status: int) -> None:
        self._metrics.count_http(method, route, status)

    def count_http_error(self, code: str) -> None:
        self._metrics.count_error(code, "http")

    def process_metrics(self) -> bytes:
        snapshot = Snapshot(hub=self._hub.statistics(), store=self._store.statistics())
        return self._metrics.process_exposition(snapshot)

    def database_metrics(self, queues: Mapping[str, Mapping[str, Any]] | None) -> tuple[bytes, str]:
        return database_exposition(queues), CONTENT_TYPE
