"""This instance's copy of the cluster settings: its flags written at start, the table re-read every few seconds.

Theory of operation. The cluster settings (:mod:`pulse_trio.cluster_settings`)
live in ``cluster_settings``; the server's parts read them as
``settings.current.X`` (a frozen :class:`~pulse_trio.config.Settings` in the
instance's one :class:`~pulse_trio.server.live_settings.LiveSettings`) on
every decision. This module keeps that copy current:

* :meth:`SettingsSync.load`, once, before the node is recorded: the
  settings given by flag or ``PULSE_…`` variable are written to the
  cluster (one transaction), then the whole table is read. Until it has
  succeeded the node is not recorded, so no worker is served with values
  the cluster has not confirmed.
* :meth:`SettingsSync.run`: every :attr:`interval` (``REFRESH_S``, or the
  node heartbeat when shorter) the table is read again and the live
  settings replaced by a copy with the new values. A change made anywhere
  therefore reaches every running instance within one interval.

A flag that replaced a different stored value, and a flag the cluster has
since moved away from, are *conflicts*: each is logged as a WARNING when it
happens and listed in ``/readyz`` (``settings_conflicts``) while it lasts,
so operators see two instances started with different values fighting.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import trio

from pulse_trio import cluster_settings as cs
from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.live_settings import LiveSettings
from pulse_trio.server.outage_log import OutageLog
from pulse_trio.store.engine.results import Refusal
from pulse_trio.store.cluster_setting.settings import StoredSetting, read_all, refusal, set_values
from pulse_trio.store.engine.trio_bridge import Store

log = logging.getLogger("pulse_trio.settings")

#: The longest a running instance goes without re-reading the cluster's settings.
REFRESH_S = 2.0


class SettingsRefused(RuntimeError):
    """The cluster refused this instance's flags (node_lapse under twice node_heartbeat)."""

    def __init__(self, refused: Refusal) -> None:
        super().__init__(f"the cluster refused this instance's settings: {refused.message}")


async def check_given(store: Store, given_ms: Mapping[str, int | None], *, timeout_s: float) -> None:
    """Raise :class:`SettingsRefused` if the cluster would refuse ``given_ms`` now; nothing is written.

    For a serve group's first process, which serves nothing itself: its
    members each write the flags when they start (:meth:`SettingsSync.load`).
    Given up after ``timeout_s`` (TooSlowError), or at once without an answer
    (``Store.run_once``): a database that hangs must not hold the group's
    start through the store's retries, and what this could not check, each
    member checks once the database answers.
    """
    if given_ms:
        refused = await store.run_once(refusal, timeout_s=timeout_s, values=given_ms)
        if refused is not None:
            raise SettingsRefused(refused)


def _who(row: StoredSetting) -> str:
    return f"{row.updated_by} at {row.updated_at:%Y-%m-%dT%H:%M:%S}Z" if row.updated_by and row.updated_at \
        else "the default, never set"


@dataclasses.dataclass(frozen=True, slots=True)
class Conflict:
    """A flag of this instance that disagrees, or disagreed at start, with the cluster."""

    name: str
    flag_ms: int | None
    replaced: StoredSetting | None  # what the flag replaced at start, if that was a different value
    cluster: StoredSetting  # the cluster's row now

    @property
    def message(self) -> str:
        setting = cs.BY_NAME[self.name]
        flag = f"{setting.flag} {setting.describe(self.flag_ms)}"
        if self.cluster.value_ms != self.flag_ms:
            return (f"the cluster's {self.name} is {setting.describe(self.cluster.value_ms)} "
                    f"({_who(self.cluster)}): this instance's {flag} no longer applies")
        assert self.replaced is not None
        return (f"this instance's {flag} replaced the cluster's {setting.describe(self.replaced.value_ms)} "
                f"({_who(self.replaced)}) when it started")

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name, "flag": cs.json_seconds(self.flag_ms),
            "replaced": None if self.replaced is None else cs.json_seconds(self.replaced.value_ms),
            "replaced_by": None if self.replaced is None else self.replaced.updated_by,
            "cluster": cs.json_seconds(self.cluster.value_ms), "cluster_by": self.cluster.updated_by,
            "message": self.message,
        }


class SettingsSync:
    """Writes this instance's given cluster settings once, then keeps its :class:`LiveSettings` current."""

    def __init__(self, *, store: Store, clock: ServiceClock, settings: LiveSettings,
                 given_ms: Mapping[str, int | None]) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.given = dict(given_ms)
        self.loaded = False
        self._replaced: dict[str, StoredSetting] = {}
        self._current: dict[str, StoredSetting] = {}
        self._lock = trio.Lock()

    @property
    def interval(self) -> float:
        return min(REFRESH_S, self.settings.current.node_heartbeat)

    async def load(self, *, strict: bool = False) -> None:
        """Write the given settings (once) and read the cluster's; the database's errors propagate.

        A refusal raises :class:`SettingsRefused` when ``strict`` (``serve``
        at start: better not to start than to run on values nobody chose);
        later it is logged, and this instance follows the cluster's values.
        """
        async with self._lock:
            if self.loaded:
                return
            store = self.store
            if self.given:
                result = await store.run(set_values, values=self.given, now=self.clock.now(),
                                         updated_by=f"serve:{store.node_id}")
                if isinstance(result, Refusal):
                    refused = SettingsRefused(result)
                    if strict:
                        raise refused
                    log.error("%s; following the cluster's values instead", refused)
                else:
                    self._note_replaced(result.before)
            self._apply(await store.run(read_all))
            self.loaded = True

    async def refresh(self) -> None:
        """Read the cluster's settings now (loading first if that has not happened yet)."""
        if not self.loaded:
            await self.load()
            return
        self._apply(await self.store.run(read_all))

    async def run(self) -> None:
        """Re-read every :attr:`interval` until cancelled; a failure is logged (once an outage) and tried again."""
        outage = OutageLog(log, "cluster settings not re-read (database unavailable?); keeping the last values",
                           "cluster settings read again", level=logging.WARNING)
        while True:
            await trio.sleep(self.interval)
            try:
                await self.refresh()
            except Exception:
                outage.failed()
            else:
                outage.worked()

    def conflicts(self) -> list[Conflict]:
        """This instance's flags that replaced a different value at start, or that the cluster left since."""
        found = []
        for name, flag_ms in self.given.items():
            cluster = self._current.get(name)
            replaced = self._replaced.get(name)
            if cluster is not None and (replaced is not None or cluster.value_ms != flag_ms):
                found.append(Conflict(name, flag_ms, replaced, cluster))
        return found

    def _note_replaced(self, before: Mapping[str, StoredSetting]) -> None:
        for name, flag_ms in self.given.items():
            row = before[name]
            if row.value_ms == flag_ms:
                continue
            self._replaced[name] = row
            setting = cs.BY_NAME[name]
            log.warning("cluster setting %s: this instance's %s %s replaces the stored %s (%s); every instance "
                        "now uses %s. If another instance runs with a different %s, the last one started wins",
                        name, setting.flag, setting.describe(flag_ms), setting.describe(row.value_ms), _who(row),
                        setting.describe(flag_ms), setting.flag)

    def _apply(self, rows: Mapping[str, StoredSetting]) -> None:
        previous, self._current = self._current, dict(rows)
        for name, row in rows.items():
            old = previous.get(name)
            if old is None or old.value_ms == row.value_ms:
                continue
            setting = cs.BY_NAME[name]
            if name in self.given and row.value_ms != self.given[name]:
                log.warning("cluster setting %s changed from %s to %s (%s); this instance's %s %s no longer "
                            "applies", name, setting.describe(old.value_ms), setting.describe(row.value_ms),
                            _who(row), setting.flag, setting.describe(self.given[name]))
            else:
                log.info("cluster setting %s changed from %s to %s (%s)", name, setting.describe(old.value_ms),
                         setting.describe(row.value_ms), _who(row))
        self.settings.replace(self.settings.current.with_cluster({name: row.value_ms for name, row in rows.items()}))


__all__ = ["REFRESH_S", "Conflict", "SettingsRefused", "SettingsSync", "check_given"]
