"""Typed payloads: a handler's second parameter names the type its payload is decoded into.

::

    @dataclasses.dataclass
    class Invoice:
        invoice: int
        amount: str

    @registry.handler("billing", "invoice.send")
    async def send(task: TaskContext, invoice: Invoice) -> dict: ...

The payload is decoded and validated before the handler is called, from
the exact JSON text the producer submitted: by ``msgspec`` for dataclasses,
``msgspec.Struct`` types and typed builtins (``dict[str, int]``,
``list[str]`` ...), by pydantic for a pydantic model (when pydantic is
installed). A payload that does not fit raises :class:`InvalidPayload`,
whose message names the field; the worker finishes the task FAILED with
``invalid_payload``, not retryable, without calling the handler.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

import msgspec

#: The error code of a payload that does not fit the handler's type.
INVALID_PAYLOAD = "invalid_payload"

Decoder = Callable[[str], Any]


class InvalidPayload(ValueError):
    """The payload does not fit the handler's payload type (the message names the field)."""


def payload_decoder(fn: Callable[..., Any]) -> tuple[Decoder | None, bool]:
    """(the decoder of ``fn``'s payload parameter, whether ``fn`` takes one).

    ``fn(task)`` takes none. ``fn(task, payload)`` takes one: without an
    annotation (or annotated ``Any``) it gets the plain JSON value, else the
    value decoded into the annotated type.
    """
    parameters = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(parameters) < 2:
        return None, False
    if len(parameters) > 2 and any(p.default is p.empty for p in parameters[2:]):
        raise TypeError(f"{fn!r}: a handler takes (task) or (task, payload), not {len(parameters)} parameters")
    name = parameters[1].name
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # an annotation naming something the module cannot see
        raise TypeError(f"{fn!r}: cannot resolve the annotation of {name!r}: {exc}") from None
    annotation = hints.get(name, Any)
    return decoder_for(annotation), True


def decoder_for(annotation: Any) -> Decoder:
    """A function from JSON text to a value of ``annotation``, raising :class:`InvalidPayload`."""
    label = getattr(annotation, "__name__", None) or repr(annotation)
    validate_json = _pydantic_validator(annotation)
    if validate_json is not None:
        return _pydantic_decoder(validate_json, label)
    try:
        decoder = msgspec.json.Decoder(annotation)
    except TypeError as exc:
        raise TypeError(f"payload type {label} is not supported: {exc}") from None

    def decode(text: str) -> Any:
        try:
            return decoder.decode(text)
        except msgspec.ValidationError as exc:
            raise InvalidPayload(f"the payload does not fit {label}: {exc}") from None
        except msgspec.DecodeError as exc:  # not reachable with a payload the service accepted
            raise InvalidPayload(f"the payload is not JSON: {exc}") from None

    return decode


def _pydantic_validator(annotation: Any) -> Callable[[str], Any] | None:
    """``annotation.model_validate_json`` for a pydantic (v2) model, without importing pydantic."""
    if not isinstance(annotation, type):
        return None
    if not any(base.__module__.startswith("pydantic") and base.__name__ == "BaseModel"
               for base in annotation.__mro__):
        return None
    return annotation.model_validate_json  # type: ignore[attr-defined,no-any-return]


def _pydantic_decoder(validate_json: Callable[[str], Any], label: str) -> Decoder:
    def decode(text: str) -> Any:
        try:
            return validate_json(text)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise InvalidPayload(f"the payload does not fit {label}: {_pydantic_message(exc)}") from None

    return decode


def _pydantic_message(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    parts = []
    for error in errors()[:5]:
        where = "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.get("loc", ()))
        parts.append(f"{error.get('msg', 'invalid')} - at `{where}`")
    return "; ".join(parts)


def to_builtins(value: Any) -> Any:
    """A result as JSON-ready builtins: dataclasses, Structs and pydantic models become objects."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return dump(mode="json")
    return msgspec.to_builtins(value)
