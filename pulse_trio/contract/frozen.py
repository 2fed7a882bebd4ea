"""``@frozen``: a frozen, slotted dataclass whose ``__init__`` sets each slot through its descriptor.

The dataclass ``__init__`` of a frozen class sets every field through
``object.__setattr__``, which looks the attribute up again for each field.
The service builds several such values per task (messages, lease commands,
receipts, views, the contexts its guards read), so it pays that on its hot
path. The ``__init__`` made here calls each slot's own descriptor instead.
Everything else is the dataclass's: the signature (names, order, defaults,
keyword-only fields, refusal of unknown keywords), ``__post_init__`` and
its checks, equality, hashing, ``repr`` and ``dataclasses.replace``; the
instance is as frozen as before.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar, dataclass_transform

C = TypeVar("C", bound=type)


@dataclass_transform(frozen_default=True)
def frozen(cls: C) -> C:
    """``@frozen`` in place of ``@dataclass(frozen=True, slots=True)``."""
    return with_slot_init(dataclasses.dataclass(frozen=True, slots=True)(cls))


def with_slot_init(cls: C) -> C:
    """Give a frozen slotted dataclass the descriptor-setting ``__init__`` (see the module docstring)."""
    if not getattr(cls, "__dataclass_params__").frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: only a frozen, slotted dataclass")
    namespace: dict[str, Any] = {"MISSING": dataclasses.MISSING}
    positional, keyword, body = [], [], []
    for f in dataclasses.fields(cls):
        namespace[f"set_{f.name}"] = getattr(cls, f.name).__set__
        has_default = f.default is not dataclasses.MISSING
        has_factory = f.default_factory is not dataclasses.MISSING
        if has_default:
            namespace[f"default_{f.name}"] = f.default
        if has_factory:
            namespace[f"factory_{f.name}"] = f.default_factory
        if not f.init:  # not a parameter: the dataclass sets it from its default, if it has one
            if has_default:
                body.append(f"    set_{f.name}(self, default_{f.name})")
            elif has_factory:
                body.append(f"    set_{f.name}(self, factory_{f.name}())")
            continue
        if has_factory:  # a sentinel default, replaced by a fresh value per instance
            param = f"{f.name}=MISSING"
            body.append(f"    set_{f.name}(self, factory_{f.name}() if {f.name} is MISSING else {f.name})")
        else:
            param = f"{f.name}=default_{f.name}" if has_default else f.name
            body.append(f"    set_{f.name}(self, {f.name})")
        (keyword if f.kw_only else positional).append(param)
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    params_text = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    source = f"def __init__({params_text}):\n" + "\n".join(body or ["    pass"]) + "\n"
    exec(compile(source, f"<slot init: {cls.__name__}>", "exec"), namespace)  # noqa: S102
    init = namespace["__init__"]
    if _shape(init) != _shape(cls.__init__):  # an InitVar, say: keep nothing that would not take the same calls
        raise TypeError(f"{cls.__name__}: its __init__ takes parameters a slot __init__ cannot")
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__signature__ = inspect.signature(cls.__init__)  # what help() and inspect show: annotations, <factory>
    cls.__init__ = init  # type: ignore[misc]
    return cls


def _shape(init: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(init).parameters.values()]


__all__ = ["frozen", "with_slot_init"]
