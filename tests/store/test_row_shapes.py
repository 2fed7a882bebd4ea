"""Row objects built by a shape equal the dataclass's own and stay frozen; time conversions keep the moment."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from pulse_trio.store.engine.rows import (LEASE_COMMAND, LEASE_KNOWN, TASK_FULL, TASK_KNOWN, TASK_PICKUP, LeaseRow,
                                          TaskRow)
from pulse_trio.store.engine.tx import db_time, py_time

_NAIVE = dt.datetime(2026, 12, 4, 12, 0, 0, 250000)


def _db_row(names: tuple[str, ...], cls: type) -> tuple:
    """What PyMySQL hands over: naive datetimes, 0/1 for booleans, text otherwise."""
    return tuple(_NAIVE if n in cls._TIMES else 1 if n in cls._BOOLS else f"v-{n}" for n in names)


@pytest.mark.parametrize("shape", [TASK_FULL, TASK_PICKUP, LEASE_COMMAND, TASK_KNOWN, LEASE_KNOWN],
                         ids=["task-full", "pickup", "lease-cmd", "task-known", "lease-known"])
def test_a_shape_builds_what_the_dataclass_would_with_unread_columns_none(shape):
    built = shape.build(_db_row(shape.names, shape.cls))
    expected = {n: None for n in shape.cls.NAMES}
    for n in shape.names:
        if n in shape.cls._TIMES:
            expected[n] = _NAIVE.replace(tzinfo=dt.timezone.utc)
        elif n in shape.cls._BOOLS:
            expected[n] = True
        else:
            expected[n] = f"v-{n}"
    assert built == shape.cls(**expected)
    assert type(built) is shape.cls


def test_an_unread_column_reads_as_none_and_a_name_that_is_no_column_still_fails():
    """A narrow shape leaves the other slots unset; the row answers None for them, as for a NULL."""
    built = TASK_KNOWN.build(("tsk_1", "RUNNING", 1))
    assert (built.payload, built.concurrency_key, built.attempt) == (None, None, 1)
    assert dataclasses.replace(built, attempt=2) == TASK_KNOWN.build(("tsk_1", "RUNNING", 2))
    assert "payload=None" in repr(built)
    with pytest.raises(AttributeError):
        built.no_such_column  # noqa: B018
    with pytest.raises(AttributeError):
        getattr(LEASE_KNOWN.build(("lse_1", "tsk_1", 1, None)), "__no_such_dunder__")


def test_a_built_row_is_frozen():
    built = TASK_PICKUP.build(_db_row(TASK_PICKUP.names, TaskRow))
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.state = "RUNNING"  # type: ignore[misc]


def test_a_row_of_the_wrong_width_is_refused_not_shifted():
    with pytest.raises((ValueError, IndexError)):
        LEASE_COMMAND.build(_db_row(LEASE_COMMAND.names, LeaseRow)[:-1])


@pytest.mark.parametrize("moment", [
    dt.datetime(2026, 12, 4, 12, 0, 0, 250000, tzinfo=dt.timezone.utc),
    dt.datetime(2026, 12, 4, 17, 30, 0, 1, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
    dt.datetime(2026, 3, 29, 0, 59, 59, 999999, tzinfo=dt.timezone(dt.timedelta(hours=-1))),
])
def test_time_conversions_keep_the_moment(moment):
    stored = db_time(moment)
    assert stored.tzinfo is None and stored == moment.astimezone(dt.timezone.utc).replace(tzinfo=None)
    back = py_time(stored)
    assert back == moment and back.tzinfo is dt.timezone.utc
    assert db_time(stored) is stored and py_time(None) is None
