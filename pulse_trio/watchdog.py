"""Keep systemd's watchdog fed from the event loop it watches: ``WATCHDOG=1`` every half interval.

The ping is a task of the process's own loop (written on AnyIO, so it runs
on any backend), so a loop that is held (a
blocking call on it), deadlocked or stopped sends nothing, and systemd
restarts the service once the unit's ``WatchdogSec=`` passes without one.
Half the interval leaves a loop that is busy for a moment (a loaded machine)
the other half. Nothing else withholds a ping unless the caller says so
(``withheld``: a serve group's silent member); in particular not the
database: a restart cannot bring it back, and the service already rides its
outages (``/readyz`` is what reports them).
"""

from __future__ import annotations

import faulthandler
import logging
import signal
from collections.abc import Callable

import anyio

from pulse_trio import sd_notify

log = logging.getLogger("pulse_trio.systemd")


def dump_stacks_when_killed() -> None:
    """Write every thread's stack to stderr (the journal) on systemd's watchdog signal, SIGABRT by default:
    what the hung process was doing when it was killed."""
    if not faulthandler.is_enabled():
        faulthandler.enable()


#: What a serve group's first process sends a member that fell silent: that member writes its threads' stacks.
#: systemd's SIGABRT reaches the first process alone (``KillMode=mixed``), whose stacks show nothing of it.
DUMP_STACKS_SIGNAL = signal.SIGUSR1
#: The shortest wait between two pings, whatever the interval: a tiny ``WATCHDOG_USEC`` must not make a
#: busy loop of the pings (no loop can honour it anyway).
MIN_PING_GAP_S = 0.001


def dump_stacks_when_asked() -> None:
    """A serve group's member: write every thread's stack to stderr (the journal, through the first process)
    on :data:`DUMP_STACKS_SIGNAL`, even while its event loop is held, and go on running."""
    faulthandler.register(DUMP_STACKS_SIGNAL, all_threads=True)


def ping() -> bool:
    """One ``WATCHDOG=1``, never waiting on systemd's queue (it is sent from the loop it vouches for)."""
    return sd_notify.notify("WATCHDOG=1", wait=False)


async def keep_alive(interval: float, withheld: Callable[[], str | None] = lambda: None,
                     ping: Callable[[], object] = ping) -> None:
    """``ping()`` every ``interval / 2`` seconds until cancelled, except while ``withheld()`` names a reason.

    A reason is logged once when it appears, and once more when the pings resume.
    """
    reason: str | None = None
    while True:
        now = withheld()
        if now is None:
            if reason is not None:
                log.warning("watchdog pings resume (withheld while: %s)", reason)
            ping()
        elif reason is None:
            log.error("watchdog pings withheld (systemd restarts the service unless this ends within %g s): %s",
                      interval, now)
        reason = now
        await anyio.sleep(max(interval / 2, MIN_PING_GAP_S))
