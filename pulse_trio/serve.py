"""One serve process: the worker service, and the HTTP API beside it; or a group of them.

The one module that knows both halves. ``pulse_trio.server`` runs the
worker endpoint, the dispatcher and the timers; ``pulse_trio.http`` serves
the API through the producer client and the store, plus the narrow
:class:`~pulse_trio.live_instance.LiveInstance` for what only the running
instance can do. Neither package imports the other: they meet here.
With ``--processes N`` (:func:`serve_group`) this process binds both
addresses and runs N members (``pulse_trio.group``), each a ``serve`` of
its own on the sockets it inherits (:func:`serve` with ``member``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import trio

from pulse_trio.config import Settings
from pulse_trio.dburl import DatabaseConfig
from pulse_trio.group.member import GroupMember
from pulse_trio.group.parent import GroupAddresses, run_group
from pulse_trio.http.server import HttpApi
from pulse_trio.listen import bind_workers
from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.service import DEFAULT_POOL_SIZE, Inherited, ServiceHandle, run_service
from pulse_trio.server.settings_sync import SettingsRefused, check_given
from pulse_trio.store.engine.trio_bridge import Store

log = logging.getLogger("pulse_trio.serve")


async def serve(settings: Settings, database: DatabaseConfig, *, handle_signals: bool = True,
                clock: ServiceClock | None = None, pool_size: int = DEFAULT_POOL_SIZE,
                member: GroupMember | None = None,
                task_status: trio.TaskStatus[ServiceHandle] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the instance and its HTTP API until stopped (the database must already be migrated).

    ``member``: this process is a member of a serve group and serves on the sockets its parent bound.
    """
    shared_metrics = member.shared_metrics() if member is not None else None
    if member is None:
        beside, inherited = HttpApi(settings), None
    else:
        beside = HttpApi(settings, sockets=member.http_sockets(), shared_metrics=shared_metrics)
        inherited = Inherited(worker_sockets=member.worker_sockets(), gate=member.shares(),
                              siblings=member.sibling_wake())
    try:
        await run_service(settings, database, beside=beside, handle_signals=handle_signals, clock=clock,
                          pool_size=pool_size, inherited=inherited, task_status=task_status)
    finally:
        if shared_metrics is not None:
            shared_metrics.withdraw()  # the group's folder outlives no member, even when the parent is gone


async def serve_group(settings: Settings, database: DatabaseConfig, member_command: Sequence[str],
                      on_ready: Callable[[GroupAddresses], None] = lambda addresses: None,
                      on_stopping: Callable[[], None] = lambda: None, watchdog_s: float | None = None,
                      on_alive: Callable[[], object] = lambda: None) -> int:
    """Bind both addresses, run ``settings.processes`` members on them until stopped; the group's exit code.

    ``on_ready``, ``on_stopping``, ``watchdog_s`` and ``on_alive``: as :func:`~pulse_trio.group.parent.run_group`.

    A taken port stops the start with a ListenError, and flags the cluster refuses with SettingsRefused, before
    any member starts (each member would fail on its own, and say so). A database that does not answer the
    check leaves it to the members, which start without it as one process does.
    """
    worker_sockets = await bind_workers(settings.worker_listen)
    http = HttpApi(settings)
    try:
        http.bind()
        store = Store(database, pool_size=1)
        try:
            await check_given(store, settings.given_ms(), timeout_s=2 * database.connect_timeout)
        except SettingsRefused:
            raise
        except Exception:  # as one process does: the members start, and check the flags once it answers
            log.warning("the cluster's settings not checked (database unavailable); each serve process "
                        "checks them once it answers", exc_info=True)
        finally:
            store.close()
        assert http.sockets is not None
        http_sockets = [*http.sockets.secure_sockets, *http.sockets.insecure_sockets]
        addresses = GroupAddresses(worker_port=worker_sockets[0].getsockname()[1],
                                   http_port=http_sockets[0].getsockname()[1])
        return await run_group(settings, database.url(redact=False), [s.fileno() for s in worker_sockets],
                               [s.fileno() for s in http_sockets], member_command, addresses, on_ready,
                               on_stopping, watchdog_s, on_alive)
    finally:
        for sock in worker_sockets:
            sock.close()
        http.close()
