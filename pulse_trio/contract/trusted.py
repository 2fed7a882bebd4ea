"""Messages this side builds from values it made or its store returned, without the per-field checks.

A message's ``__post_init__`` guards what a peer or a caller builds. The
server's own frames are made of values that were checked on their way in
(a command's ids, decoded by the strict reader; a task's fields, validated
at submit and stored as that exact text) or that the service made itself
(frame and lease ids, secrets, revisions, times it computed): checking
them again per frame costs the hot path without guarding anything.
:class:`Trusted` builds such a message as frozen as its constructor would,
in the class's field order; every other maker of messages still goes
through the checks.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Trusted(Generic[T]):
    """``Trusted(cls)(*values)``: a frozen ``cls`` from its fields' values in declaration order, unchecked."""

    def __init__(self, cls: type[T]) -> None:
        self.cls = cls
        self._setters = tuple(getattr(cls, f.name).__set__ for f in dataclasses.fields(cls))

    def __call__(self, *values: Any) -> T:
        made = object.__new__(self.cls)
        for set_slot, value in zip(self._setters, values, strict=True):
            set_slot(made, value)
        return made


__all__ = ["Trusted"]
