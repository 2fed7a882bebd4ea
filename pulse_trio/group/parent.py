"""The parent of a serve group: start the members, report when all serve, stop them together.

It does not serve itself. It hands each member the sockets bound by
``pulse_trio.serve.serve_group`` and supervises: SIGTERM, SIGINT or SIGHUP stops
every member the orderly way (it closes their links; each closes its
sessions and records its node STOPPED, as on its own SIGTERM); a member
that exits on its own stops the group, and the parent exits with that
member's code, so a service manager restarts the whole (nothing is lost:
every lease and task lives in the database, and the workers resume on the
new members). A member still running when :data:`STOP_TIMEOUT_S` has
passed is killed. Under systemd's watchdog it says the group is alive only
while every member's loop beats (:mod:`~pulse_trio.group.heartbeats`): a
member that hangs without exiting gets the group restarted too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import trio

from pulse_trio.child_process import child_environment
from pulse_trio.config import Settings, without_serve_settings
from pulse_trio.group.heartbeats import Heartbeats, create_heartbeats
from pulse_trio.group.member import ENVIRONMENT, READY, GroupMember
from pulse_trio.group.shares import create_shares
from pulse_trio.sd_notify import without_notify_socket
from pulse_trio.stop_signals import STOP_SIGNALS
from pulse_trio.watchdog import DUMP_STACKS_SIGNAL, keep_alive

log = logging.getLogger("pulse_trio.group")

#: How long a stop waits for the members' orderly shutdowns before it kills them.
STOP_TIMEOUT_S = 30.0
#: How long a member's exit waits for the group's own stop before it counts as the member's failure.
SIGNAL_SPREAD_S = 0.5
_SHARED_MEMORY = Path("/dev/shm")


@dataclasses.dataclass(frozen=True)
class GroupAddresses:
    """Where the group listens: what ``on_ready`` is given once every member serves."""

    worker_port: int
    http_port: int


async def run_group(settings: Settings, database_url: str, worker_fds: Sequence[int], http_fds: Sequence[int],
                    member_command: Sequence[str], addresses: GroupAddresses,
                    on_ready: Callable[[GroupAddresses], None] = lambda addresses: None,
                    on_stopping: Callable[[], None] = lambda: None, watchdog_s: float | None = None,
                    on_alive: Callable[[], object] = lambda: None) -> int:
    """Run ``settings.processes`` members until stopped; the exit code of the member that failed, else 0.

    ``on_ready(addresses)`` once every member serves (never, if one fails first); ``on_stopping()`` when the
    group begins to stop. ``watchdog_s``: from ``on_ready`` until the stop begins, ``on_alive()`` every half
    of it while every member's loop has beaten within it.
    """
    size = settings.processes
    member_settings = dataclasses.replace(settings, database_url=database_url, processes=1)
    environment = without_notify_socket(child_environment(without_serve_settings(os.environ)))
    shares_fd = create_shares(size)
    heartbeats_fd = create_heartbeats(size) if watchdog_s is not None else None
    group = secrets.token_hex(8)
    metrics_dir = Path(tempfile.mkdtemp(prefix="pulse-trio-group-",
                                        dir=_SHARED_MEMORY if _SHARED_MEMORY.is_dir() else None))
    links: list[socket.socket] = []
    members: list[trio.Process] = []
    outcome = _Outcome()
    try:
        for index in range(size):
            parent_end, member_end = socket.socketpair()
            links.append(parent_end)
            member = GroupMember(index=index, size=size, settings=member_settings, worker_fds=tuple(worker_fds),
                                 http_fds=tuple(http_fds), shares_fd=shares_fd, link_fd=member_end.fileno(),
                                 metrics_dir=metrics_dir, group=group, heartbeats_fd=heartbeats_fd,
                                 watchdog_s=watchdog_s)
            try:
                members.append(await trio.lowlevel.open_process(
                    list(member_command), env={**environment, ENVIRONMENT: member.to_environment()},
                    pass_fds=member.inherited_fds, stdin=subprocess.DEVNULL))
            finally:
                member_end.close()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_signals, outcome)
            for index, process in enumerate(members):
                nursery.start_soon(_watch_member, index, process, outcome)
            all_ready = await _all_ready(links, outcome)
            watched = trio.CancelScope()
            if all_ready:
                log.info("%d serve processes serving", size)
                on_ready(addresses)
                if heartbeats_fd is not None and watchdog_s is not None:
                    nursery.start_soon(_keep_alive, watched, Heartbeats(heartbeats_fd, size), members,
                                       watchdog_s, on_alive)
            await outcome.stopping.wait()
            watched.cancel()  # a member that has stopped beats no more: no alarm for the group's own stop
            on_stopping()
            await _stop(members, links)
            nursery.cancel_scope.cancel()
        return outcome.exit_code
    finally:
        for process in members:
            if process.returncode is None:
                process.kill()
        for link in links:
            link.close()  # a member still reading its link learns that the parent is gone
        os.close(shares_fd)
        if heartbeats_fd is not None:
            os.close(heartbeats_fd)
        shutil.rmtree(metrics_dir, ignore_errors=True)


class _Outcome:
    def __init__(self) -> None:
        self.stopping = trio.Event()
        self.exit_code = 0

    def fail(self, code: int) -> None:
        """A member exited on its own with ``code`` (negative: killed by that signal, reported as 128 + it)."""
        if not self.stopping.is_set():
            self.exit_code = 128 - code if code < 0 else code or 1
            self.stopping.set()


async def _watch_signals(outcome: _Outcome) -> None:
    """The first SIGTERM, SIGINT or SIGHUP (a closed terminal) stops the group; later ones are taken here too,
    until the stop is over.

    Left to Python's handler, a second signal (Ctrl-C pressed twice, a script
    that signals again) would interrupt the stop and kill the members mid-shutdown.
    """
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async for signum in signals:
            if outcome.stopping.is_set():
                log.warning("%s: the group is already stopping (members still running after %g s are killed)",
                            signal.Signals(signum).name, STOP_TIMEOUT_S)
            outcome.stopping.set()


async def _watch_member(index: int, process: trio.Process, outcome: _Outcome) -> None:
    """A member that exits on its own stops the group with its code; one the group's own stop ended does not.

    A signal sent to every process of the group at once (a service manager's
    stop, Ctrl-C) can end a member still starting (still importing, it dies
    by the signal itself) before this process has taken its own copy: so its
    exit waits a moment for that stop before it counts as a failure.
    """
    code = await process.wait()
    with trio.move_on_after(SIGNAL_SPREAD_S):
        await outcome.stopping.wait()
    if not outcome.stopping.is_set():
        log.error("serve process %d of the group exited with %d: stopping the others", index, code)
        outcome.fail(code)


async def _keep_alive(scope: trio.CancelScope, heartbeats: Heartbeats, members: list[trio.Process],
                      watchdog_s: float, on_alive: Callable[[], object]) -> None:
    """``on_alive()`` every half ``watchdog_s`` while every member has beaten within it, until ``scope`` ends."""
    asked: set[int] = set()  # the silent members already asked for their stacks, this silence

    def withheld() -> str | None:
        silent = heartbeats.silent(watchdog_s)
        asked.intersection_update(silent)
        for index in set(silent) - asked:
            asked.add(index)
            with contextlib.suppress(ProcessLookupError):  # its stacks in the log, before systemd's kill
                os.kill(members[index].pid, DUMP_STACKS_SIGNAL)
        if not silent:
            return None
        named = ", ".join(f"{index} (pid {members[index].pid})" for index in silent)
        return f"no sign of life for over {watchdog_s:g} s from serve process {named} of the group"

    try:
        with scope:
            await keep_alive(watchdog_s, withheld, on_alive)
    finally:
        heartbeats.close()


async def _all_ready(links: list[socket.socket], outcome: _Outcome) -> bool:
    """True once every member has said ready; False if the group began to stop first."""
    pending = len(links)

    async with trio.open_nursery() as nursery:
        async def read(link: socket.socket) -> None:
            nonlocal pending
            await trio.lowlevel.wait_readable(link)
            if link.recv(1) == READY:
                pending -= 1
                if not pending:
                    nursery.cancel_scope.cancel()

        async def until_stopping() -> None:
            await outcome.stopping.wait()
            nursery.cancel_scope.cancel()

        for link in links:
            nursery.start_soon(read, link)
        nursery.start_soon(until_stopping)
    return not pending


async def _stop(members: list[trio.Process], links: list[socket.socket]) -> None:
    """Close every link (each member stops as on SIGTERM), then wait; whoever is left after STOP_TIMEOUT_S is killed.

    Not a signal: a service manager (systemd's default ``KillMode``) or a
    terminal's Ctrl-C signals every process of the group at once, and a
    member already stopping would take a second signal from here for a kill.
    """
    for link in links:
        link.close()
    with trio.move_on_after(STOP_TIMEOUT_S):
        for process in members:
            await process.wait()
    for process in members:
        if process.returncode is None:
            log.error("serve process pid %d did not stop within %g s: killed", process.pid, STOP_TIMEOUT_S)
            process.kill()
            await process.wait()
