"""Chart ``cluster_setting``: reading and changing the settings every process must agree on.

Three ways in, one table:

* :func:`value_ms` is for writers that fix a derived deadline into a row
  (``task.submit``: effective_at from the priority step;
  ``cancellation.request``: the grace deadline). They read the value inside
  their own transaction, so no process can write with a stale copy.
* :func:`read_all` is the read-only view the CLI, the HTTP API and every
  serve instance's refresh loop use.
* :func:`set_values` changes one or several settings in one transaction;
  :func:`refusal` says, writing nothing, whether it would refuse them now.

Values are checked against their bounds before they get here
(:mod:`pulse_trio.cluster_settings`); the one rule that spans two rows,
node_lapse at least twice node_heartbeat, is the guard, judged on the values
that result. A row missing (deleted by hand) reads as the code's default.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping

from pulse_trio import cluster_settings as cs
from pulse_trio.charts import CHARTS
from pulse_trio.store.engine.chart_write import create, move
from pulse_trio.store.engine.guard_context import SettingContext
from pulse_trio.store.engine.registry import decide, guard, read_only, transition
from pulse_trio.store.engine.results import Refusal
from pulse_trio.store.engine.tx import Tx, db_actor, db_time, py_time
from pulse_trio.store.cluster_setting import sql

#: A setting nobody set: the chart's initial state, whether or not its row exists yet.
_UNSET = CHARTS["cluster_setting"].spec.initial


@dataclasses.dataclass(frozen=True, slots=True)
class StoredSetting:
    """One row: the value (ms, None where allowed), DEFAULT or SET, and who set it last."""

    name: str
    value_ms: int | None
    state: str
    updated_at: dt.datetime | None
    updated_by: str | None

    @classmethod
    def default(cls, name: str) -> StoredSetting:
        return cls(name, cs.DEFAULTS_MS[name], _UNSET, None, None)

    def as_json(self) -> dict[str, object]:
        setting = cs.BY_NAME[self.name]
        return {
            "name": self.name, "value": cs.json_seconds(self.value_ms), "unit": "s", "meaning": setting.describe(self.value_ms),
            "default": cs.json_seconds(setting.default_ms), "state": self.state,
            "updated_at": self.updated_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if self.updated_at else None,
            "updated_by": self.updated_by, "description": setting.help,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class SettingsChange:
    """What :func:`set_values` found before it wrote, and what it wrote."""

    before: Mapping[str, StoredSetting]
    after: Mapping[str, StoredSetting]


def _stored(tx: Tx, *, lock: bool) -> dict[str, StoredSetting]:
    """The settings that have a row (a setting added after migration 0009 has none until it is set)."""
    return {r[0]: StoredSetting(r[0], None if r[1] is None else int(r[1]), r[2], py_time(r[3]), r[4])
            for r in tx.all(sql.SETTINGS + (sql.FOR_UPDATE if lock else ""))}


def _rows(tx: Tx, *, lock: bool) -> dict[str, StoredSetting]:
    found = _stored(tx, lock=lock)
    return {name: found.get(name) or StoredSetting.default(name) for name in cs.NAMES}


def value_ms(tx: Tx, name: str) -> int | None:
    """The cluster's value of one setting, read in the caller's transaction (ms; None where allowed)."""
    return values_ms(tx, name)[name]


def values_ms(tx: Tx, *names: str) -> dict[str, int | None]:
    """Several settings' values in one statement (a submit with fairness keys needs two); the default where unset."""
    for name in names:
        cs.lookup(name)
    found = {n: v for n, v in tx.all(sql.VALUES_OF, (names,))}
    return {n: (None if found[n] is None else int(found[n])) if n in found else cs.DEFAULTS_MS[n] for n in names}


@read_only(takes_locks=False)
def read_all(tx: Tx) -> dict[str, StoredSetting]:
    """Every cluster setting, in the order of :data:`pulse_trio.cluster_settings.SETTINGS`."""
    return _rows(tx, lock=False)


@guard("cluster_setting", "heartbeat_fits_lapse", code=cs.SETTING_CONFLICT)
def _heartbeat_fits_lapse(c) -> bool:
    """node_lapse stays at least twice node_heartbeat, judged on the values the change leaves."""
    return cs.pair_problem(c.values) is None


@transition("cluster_setting", "set")
def set_values(tx: Tx, *, values: Mapping[str, int | None], now: dt.datetime,
               updated_by: str) -> SettingsChange | Refusal:
    """Store ``values`` (ms, already checked against each setting's bounds) in one transaction."""
    for name, ms in values.items():
        cs.lookup(name).from_seconds(cs.json_seconds(ms))  # a caller that skipped the check fails here
    stored = _stored(tx, lock=True)
    before = {name: stored.get(name) or StoredSetting.default(name) for name in cs.NAMES}
    decided = _decide(before, values)
    if isinstance(decided, Refusal):
        return decided
    stamp = db_time(now)
    who = db_actor(updated_by)
    after = dict(before)
    for name, dest in decided.items():
        if name in stored:
            move(tx, "cluster_setting", "set", [name], source=before[name].state, dest=dest,
                 sets="value_ms = %s, updated_at = %s, updated_by = %s", args=(values[name], stamp, who))
        else:  # no row yet: it is created as the chart's set from its initial state leaves it
            create(tx, "cluster_setting", "set", dest=dest, columns=sql.SETTING_COLUMNS,
                   row=sql.SETTING_ROW, rows=[(name, values[name], stamp, who)])
        after[name] = StoredSetting(name, values[name], dest, py_time(stamp), who)
    return SettingsChange(before, after)


@read_only(takes_locks=False)
def refusal(tx: Tx, *, values: Mapping[str, int | None]) -> Refusal | None:
    """What :func:`set_values` would refuse ``values`` with now, or None; nothing is written.

    A serve group's first process asks before it starts its members, so
    flags the cluster refuses fail once rather than once per member.
    """
    decided = _decide(_rows(tx, lock=False), values)
    return decided if isinstance(decided, Refusal) else None


def _decide(before: Mapping[str, StoredSetting], values: Mapping[str, int | None]) -> dict[str, str] | Refusal:
    """Each changed setting's destination, judged on the values the change would leave; or the refusal."""
    merged = {name: values[name] if name in values else row.value_ms for name, row in before.items()}
    context = SettingContext(values=merged)
    decided = {}
    for name in values:
        dest = decide("cluster_setting", "set", before[name].state, context)
        if isinstance(dest, Refusal):
            return Refusal(dest.code, cs.pair_problem(merged) or dest.message)
        decided[name] = dest
    return decided


__all__ = ["SettingsChange", "StoredSetting", "read_all", "refusal", "set_values", "value_ms", "values_ms"]
