"""`pulse-trio serve`: run one service instance (or a group of them, `--processes`) until SIGINT/SIGTERM/SIGHUP."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pulse_trio import config as cfg
from pulse_trio import logs
from pulse_trio.cli.common import EXIT_CANNOT_LISTEN, CommandFailed, ctrl_c_alone, database, run_guarded
from pulse_trio.stop_signals import STOP_SIGNALS

if TYPE_CHECKING:
    from pulse_trio.dburl import DatabaseConfig
    from pulse_trio.group.member import GroupMember
    from pulse_trio.group.parent import GroupAddresses

log = logging.getLogger("pulse_trio.serve")
LEVELS = ("debug", "info", "warning", "error")
#: What systemd is told when a stop begins (one process or a group).
STOPPING = ("STOPPING=1", "STATUS=stopping: closing the worker sessions")


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("serve", help="run the worker endpoint, dispatcher, timers and HTTP API")
    cfg.add_options(parser)
    parser.add_argument("--log-format", choices=logs.FORMATS, default=os.environ.get("PULSE_LOG_FORMAT") or "json",
                        help="json: one JSON object per line; text: readable key=value lines [env PULSE_LOG_FORMAT]")
    parser.add_argument("--log-level", default=os.environ.get("PULSE_LOG_LEVEL") or "info",
                        choices=LEVELS, help="the least severe log lines written [env PULSE_LOG_LEVEL]")
    parser.set_defaults(run=run_guarded(_serve, long_running=True))


def _serve(args: argparse.Namespace) -> int:
    for variable, value, choices in (("PULSE_LOG_FORMAT", args.log_format, logs.FORMATS),
                                     ("PULSE_LOG_LEVEL", args.log_level, LEVELS)):
        if value not in choices:  # a flag's value met `choices` already: this one came from the variable
            raise CommandFailed(f"{variable}: {value!r} is not one of {', '.join(choices)}", 2)
    from pulse_trio.group.member import GroupMember

    member = GroupMember.from_environment()
    if member is not None:
        return _serve_member(args, member)
    settings = cfg.settings_from_args(args)
    if (settings.tls_cert is None) != (settings.tls_key is None):
        raise CommandFailed("--tls-cert and --tls-key go together", 2)
    try:
        settings.check()
    except ValueError as exc:
        raise CommandFailed(str(exc), 2) from None
    if settings.tls_cert is not None:
        _check_tls(settings.tls_cert, settings.tls_key)
    logs.configure(args.log_format, args.log_level)
    import trio

    from pulse_trio.child_process import python_command
    from pulse_trio.listen import ListenError
    from pulse_trio.serve import serve
    from pulse_trio.server.settings_sync import SettingsRefused

    with _sigterm_interrupts_the_start(), database(args, create=True) as target:
        log.info("database %s", target.url())
        try:
            if settings.processes > 1:
                member_command = python_command("pulse_trio", "serve", "--log-format", args.log_format,
                                                "--log-level", args.log_level)
                return trio.run(_serve_group_and_notify, settings, target, member_command)
            trio.run(_serve_and_notify, serve, settings, target)
        except* ListenError as group:  # bound before the node joins: nothing was recorded
            raise CommandFailed(str(_first(group)), EXIT_CANNOT_LISTEN) from None
        except* SettingsRefused as group:
            raise CommandFailed(str(_first(group)), 2) from None
    return 0


@contextlib.contextmanager
def _sigterm_interrupts_the_start() -> Iterator[None]:
    """Until the service watches for them, SIGTERM and SIGHUP interrupt like Ctrl-C, then count as the stop asked for.

    Python's own answer to either ends the process at once, which would leave
    a managed MariaDB that is still starting running with nobody to stop it.
    Raised as SIGINT instead, it unwinds what has started (Trio delivers it
    safely inside the service, whose own watcher takes SIGTERM once running);
    the interrupt it caused ends here, so ``serve`` exits 0. A Ctrl-C goes on (exit 130).
    """
    stopped: list[int] = []

    def interrupt(signum: int, frame: object) -> None:
        stopped.append(signum)
        signal.raise_signal(signal.SIGINT)

    previous = {signum: signal.signal(signum, interrupt) for signum in STOP_SIGNALS if signum != signal.SIGINT}
    try:
        yield
    except BaseException as exc:  # grouped when raised inside the service's start, by Trio's nurseries
        if not (stopped and ctrl_c_alone(exc)):
            raise  # a Ctrl-C is exit 130 (run_guarded), grouped or not
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _serve_member(args: argparse.Namespace, member: GroupMember) -> int:
    """One member of a serve group: the settings, database and sockets come from its parent."""
    import trio

    from pulse_trio.dburl import parse_database_url
    from pulse_trio.listen import ListenError
    from pulse_trio.server.settings_sync import SettingsRefused

    logs.configure(args.log_format, args.log_level)
    assert member.settings.database_url is not None
    with _signals_wait_for_the_start() as received:
        try:
            trio.run(_serve_and_report, member, parse_database_url(member.settings.database_url), received)
        except* ListenError as group:  # another process listened on the port since the parent bound it
            raise CommandFailed(str(_first(group)), EXIT_CANNOT_LISTEN) from None
        except* SettingsRefused as group:
            raise CommandFailed(str(_first(group)), 2) from None
    return 0


@contextlib.contextmanager
def _signals_wait_for_the_start() -> Iterator[list[int]]:
    """A member's SIGTERM, SIGINT or SIGHUP before the service watches for them: kept, to stop once it has started.

    They reach a member still starting when they reach the whole group (a
    service manager's stop, Ctrl-C). Python's own answers, the process ended
    at once or a KeyboardInterrupt, would end the start half-way (its node
    recorded ALIVE and left so); the group's stop reaches the member through
    its link anyway. Yields the signals received, in order.
    """
    received: list[int] = []

    def keep(signum: int, frame: object) -> None:
        received.append(signum)

    previous = {signum: signal.signal(signum, keep) for signum in STOP_SIGNALS}
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


async def _serve_and_report(member: GroupMember, target: DatabaseConfig, received: list[int]) -> None:
    """Serve; tell the parent once serving; stop as on SIGTERM once the parent closes the link (or is gone).

    ``received``: the signals that reached this member before its service watched for them (it stops at once).
    """
    import trio

    from pulse_trio.group.member import report_ready, wait_parent_gone
    from pulse_trio.serve import serve
    from pulse_trio.watchdog import dump_stacks_when_asked

    link = member.link()
    with logs.bind(member=member.index):  # every line says which member wrote it
        async with trio.open_nursery() as nursery:
            async def run(task_status: trio.TaskStatus) -> None:
                try:
                    await serve(member.settings, target, member=member, task_status=task_status)
                finally:
                    nursery.cancel_scope.cancel()  # the parent watch ends with the instance

            handle = await nursery.start(run)
            if received:
                log.info("%s while starting: stopping", signal.Signals(received[0]).name)
                handle.stop()
                return
            heartbeats = member.heartbeats()
            if heartbeats is not None and member.watchdog_s is not None:  # the group is under systemd's watchdog
                dump_stacks_when_asked()
                heartbeats.beat(member.index)  # before "ready": the first process's first look finds it beaten
                nursery.start_soon(heartbeats.beat_every, member.index, member.watchdog_s)
            try:
                await report_ready(link)
                await wait_parent_gone(link)
            except OSError:  # the parent closed its end before this member was ready: the group is stopping
                pass
            log.info("the serve group is stopping (its first process closed the link, or is gone)")
            handle.stop()


async def _serve_group_and_notify(settings: cfg.Settings, target: DatabaseConfig, member_command: list[str]) -> int:
    """Run the group; tell systemd once every member serves, that it is alive while every member's loop runs
    (under ``WatchdogSec=``), and when the group begins to stop."""
    from pulse_trio import sd_notify
    from pulse_trio.serve import serve_group
    from pulse_trio.watchdog import dump_stacks_when_killed, ping

    def ready(addresses: GroupAddresses) -> None:
        sd_notify.notify("READY=1", f"STATUS={settings.processes} processes serving workers on port "
                                    f"{addresses.worker_port}, the HTTP API on port {addresses.http_port}")

    def stopping() -> None:
        sd_notify.notify(*STOPPING)

    watchdog_s = sd_notify.watchdog_interval()
    if watchdog_s is not None:
        dump_stacks_when_killed()
    return await serve_group(settings, target, member_command, ready, stopping, watchdog_s, ping)


async def _serve_and_notify(serve, settings: cfg.Settings, target) -> None:
    """Run ``serve`` and tell systemd (``Type=notify``) once it listens: its node is ALIVE, both ports accept;
    under ``WatchdogSec=``, that its event loop runs, from a task of that loop, until its stop begins.

    The pings end before ``STOPPING=1``: systemd disarms the watchdog for the stop, and a ping after it
    would arm it again, so a stop that takes longer than the interval (the managed database's own stop)
    would end in SIGABRT instead of its orderly end.
    """
    import trio

    from pulse_trio import sd_notify
    from pulse_trio.watchdog import dump_stacks_when_killed, keep_alive

    watchdog_s = sd_notify.watchdog_interval()
    pings = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        async def run(task_status: trio.TaskStatus) -> None:
            try:
                await serve(settings, target, task_status=task_status)
            finally:
                # The pings end with the service, whatever ended it. Their own scope, not the nursery's: a
                # stop while it starts (a signal) must end it as that stop alone, its only error.
                pings.cancel()

        handle = await nursery.start(run)
        sd_notify.notify("READY=1", f"STATUS=serving workers on port {handle.worker_port}, "
                                    f"the HTTP API on port {handle.http_port}")
        if watchdog_s is not None:
            dump_stacks_when_killed()

            async def ping() -> None:
                with pings:
                    await keep_alive(watchdog_s)

            nursery.start_soon(ping)
        await handle.stopping.wait()
        pings.cancel()
        sd_notify.notify(*STOPPING)


def _check_tls(cert: object, key: object) -> None:
    """An unreadable certificate or key is a bad argument, found before anything starts."""
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as exc:
        raise CommandFailed(f"--tls-cert/--tls-key: cannot load {cert} and {key}: "
                            f"{getattr(exc, 'strerror', None) or exc}", 2) from None


def _first(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):  # one per nursery level
        error = error.exceptions[0]
    return error
