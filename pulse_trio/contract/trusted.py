"""Messages this side builds from values it made or its store returned, without the per-field checks.

A message's ``__post_init__`` guards what a peer or a caller builds. The
server's own frames are made of values that were checked on their way in
(a command's ids, decoded by the strict reader; a task's fields, validated
at submit and stored as that exact text) or that the service made itself
(frame and lease ids, secrets, revisions, times it computed): checking
them again per frame costs the hot path without guarding anything.
:func:`trusted` compiles a builder that makes such a message as frozen as
its constructor would, in the class's field order; every other maker of
messages still goes through the checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def trusted(cls: type[T]) -> Callable[..., T]:
    """``trusted(cls)(*values)``: a frozen ``cls`` from its fields' values in declaration order, unchecked.

    The builder is compiled once per class: one slot descriptor call per
    field, no loop, and it is the function the caller holds (no wrapper
    call), so a message costs about what its fields do.
    """
    names = [f.name for f in dataclasses.fields(cls)]
    return compile_slot_builder(cls, ", ".join(names), {n: n for n in names}, label="trusted")


def compile_slot_builder(cls: type, parameters: str, values: dict[str, str], *, label: str,
                         check: str = "", scope: dict[str, Any] | None = None) -> Callable[..., Any]:
    """``build(<parameters>) -> cls``, compiled: a new ``cls`` with each slot in ``values`` set to its expression.

    One slot descriptor call per value, no loop and no ``__init__`` (so no checks);
    ``check`` is a line run first, ``scope`` the names the expressions use. Slots
    left out stay unset. Shared by :func:`trusted` and the store's row shapes.
    """
    names: dict[str, Any] = {**(scope or {}), "new": object.__new__, "cls": cls}
    names.update({f"set_{n}": getattr(cls, n).__set__ for n in values})
    lines = [f"def build({parameters}):", *([f"    {check}"] if check else []), "    o = new(cls)"]
    lines += [f"    set_{n}(o, {value})" for n, value in values.items()]
    lines.append("    return o")
    exec(compile("\n".join(lines), f"<{label}: {cls.__name__}>", "exec"), names)  # noqa: S102
    return names["build"]


__all__ = ["compile_slot_builder", "trusted"]
