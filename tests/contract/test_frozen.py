"""``@frozen``: the slot-setting ``__init__`` takes exactly the calls the dataclass's own would, with the same result."""

from __future__ import annotations

import dataclasses
import inspect
from typing import ClassVar

import pytest

from pulse_trio.contract import bodies, messages
from pulse_trio.contract.frozen import frozen, with_slot_init
from pulse_trio.sdk import lease as sdk_lease
from pulse_trio.sdk import protocol as sdk_protocol
from pulse_trio.session import server as session_server
from pulse_trio.store.engine import guard_context, inputs, results, rows
from pulse_trio.store.lease import assign, known


def _declare(decorate):
    """The same declaration through ``decorate``: every kind of field a dataclass signature has."""
    @decorate
    class Sample:
        TYPE: ClassVar[str] = "sample"
        a: int
        b: list = dataclasses.field(default_factory=list)
        c: int = 3
        d: int = dataclasses.field(default=4, kw_only=True)
        e: int = dataclasses.field(default=9, init=False)

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError("a must not be negative")
    return Sample


Sample = _declare(frozen)
Reference = _declare(dataclasses.dataclass(frozen=True, slots=True))


def _fields(value: object) -> dict[str, object]:
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}  # type: ignore[arg-type]


@pytest.mark.parametrize("args,kwargs", [
    ((1,), {}), ((1, [2]), {}), ((1, [2], 5), {"d": 6}), ((), {"a": 7, "c": 8}),
])
def test_the_same_calls_give_the_same_values(args, kwargs):
    assert _fields(Sample(*args, **kwargs)) == _fields(Reference(*args, **kwargs))


@pytest.mark.parametrize("args,kwargs", [
    ((), {}), ((1, [], 3, 4), {}), ((1,), {"e": 1}), ((1,), {"unknown": 1}), ((1,), {"a": 1}),
])
def test_the_same_calls_are_refused(args, kwargs):
    with pytest.raises(TypeError):
        Reference(*args, **kwargs)
    with pytest.raises(TypeError):
        Sample(*args, **kwargs)


def test_post_init_runs_defaults_are_fresh_and_the_value_stays_frozen():
    with pytest.raises(ValueError):
        Sample(-1)
    assert Sample(1).b is not Sample(1).b
    value = Sample(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.a = 2  # type: ignore[misc]
    assert value == Sample(1) and dataclasses.replace(value, a=5).a == 5 and "a=1" in repr(value)
    assert inspect.signature(Sample) == inspect.signature(Reference)


def test_an_init_var_or_a_class_that_is_not_frozen_and_slotted_is_refused():
    with pytest.raises(TypeError):
        @frozen
        class WithInitVar:
            a: dataclasses.InitVar[int]

            def __post_init__(self, a: int) -> None: ...
    with pytest.raises(TypeError):
        with_slot_init(dataclasses.dataclass(frozen=True)(type("NoSlots", (), {"__annotations__": {"a": int}})))
    with pytest.raises(TypeError):
        with_slot_init(dataclasses.dataclass(slots=True)(type("NotFrozen", (), {"__annotations__": {"a": int}})))


@pytest.mark.parametrize("module", [messages, bodies, results, inputs, guard_context, rows, known, assign,
                                    sdk_protocol, sdk_lease, session_server])
def test_the_hot_values_use_it(module):
    """Each dataclass these modules declare is built through a slot __init__ (a regression would only cost time)."""
    classes = [v for v in vars(module).values()
               if isinstance(v, type) and dataclasses.is_dataclass(v) and v.__module__ == module.__name__]
    assert classes
    assert all(c.__init__.__code__.co_filename.startswith("<slot init:") for c in classes), [
        c.__name__ for c in classes if not c.__init__.__code__.co_filename.startswith("<slot init:")]
