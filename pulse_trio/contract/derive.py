"""What ``frames`` declares, turned into code once at import: msgspec structs, fast builders, encoders.

The fast builders and encoders are generated as Python source and compiled
(as ``dataclasses`` does for ``__init__``), so a frame costs what the
hand-written functions they replace cost: straight attribute reads, no loop
over a field table per frame.

A fast builder turns a decoded struct into its message value and counts, on
the way, the keys the frame holds and the colons inside its string values
(the repeated-key check of :mod:`fast_client`); it raises :class:`Decline`
for a frame only the reference decoder may judge. An encoder turns a value
into the dict msgspec writes, fields in wire order, optional ones omitted at
their default.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Literal

import msgspec
from msgspec import UNSET, Raw, UnsetType

from . import frames as fr
from .grammar import format_time, parse_counter, parse_time
from .limits import PROTOCOL_VERSION

_WIRE_TYPES: dict[str, Any] = {
    "str": str, "counter": str, "time": str, "int": int, "bool": bool, "json": Raw, "strs": list[str],
}


class Decline(ValueError):
    """A frame the fast path leaves to the reference decoder."""


#: What msgspec raises on a frame it cannot read into these structs: its own errors, and RecursionError
#: from an open (``Raw``) value nested past the interpreter's stack, which msgspec walks before any depth
#: check of ours runs. Every fast path declines on both; the reference path answers (``invalid_json``).
UNREADABLE = (msgspec.DecodeError, RecursionError)


class Count:
    """Keys and the colons of string values, as a frame's structs are walked; the open JSON fragment."""

    __slots__ = ("keys", "colons", "fragment")

    def __init__(self, keys: int, colons: int) -> None:
        self.keys = keys
        self.colons = colons
        self.fragment = b""


# -- msgspec structs ---------------------------------------------------------------------------

def _wire_type(field: fr.Field) -> Any:
    kind = field.kind
    if isinstance(kind, fr.Many):
        return list[struct(kind.item)]
    if isinstance(kind, fr.Obj):
        return struct(kind, field.variant)
    return _WIRE_TYPES[kind]


@functools.cache
def struct(obj: fr.Obj, variant: bool = False) -> type:
    """The closed msgspec struct of an object; optional fields are ``UNSET`` when absent."""
    fields: list[tuple] = []
    for f in obj.fields:
        if f.presence == fr.VARIANT and not variant:
            continue
        wire = _wire_type(f)
        fields.append((f.name, wire | UnsetType, UNSET) if f.presence == fr.OPTIONAL else (f.name, wire))
    name = "".join(part.title() for part in obj.name.split("_")) + ("Variant" if variant else "")
    return msgspec.defstruct(name, fields, kw_only=True, forbid_unknown_fields=True)


@functools.cache
def frame_struct(frame: fr.Frame, body: Any) -> type:
    """The tagged struct of a whole frame (envelope fields required), ``body`` its body's type."""
    fields: list[tuple] = [("protocol_version", Literal[PROTOCOL_VERSION]), ("id", str)]
    fields += [(key, str) for key in ("session_id", "reply_to") if getattr(frame, key) == fr.REQUIRED]
    fields.append((frame.body_key, body))
    name = "".join(part.title() for part in frame.cls.TYPE.replace(".", "_").split("_")) + "Frame"
    return msgspec.defstruct(name, fields, tag=frame.cls.TYPE, tag_field="type", forbid_unknown_fields=True)


# -- code generation ------------------------------------------------------------------------------

class _Source:
    """Lines of generated code and the globals they name."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {"UNSET": UNSET, "Decline": Decline, "parse_counter": parse_counter,
                                      "parse_time": parse_time, "format_time": format_time, "Raw": Raw}

    def name(self, value: Any, hint: str) -> str:
        for key, known in self.names.items():
            if known is value and key.startswith(hint):
                return key
        key = f"{hint}{len(self.names)}"
        self.names[key] = value
        return key

    def compile(self, function: str) -> Callable:
        exec(compile("\n".join(self.lines), f"<frames: {function}>", "exec"), self.names)  # noqa: S102
        return self.names[function]


def _defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls)}


def _is_string(field: fr.Field) -> bool:
    return isinstance(field.kind, str) and field.kind in fr.STRING_KINDS


def _fast_fields(src: _Source, obj: fr.Obj, variant: bool, value: str, cls: type, json: dict,
                 indent: str) -> dict[str, str]:
    """Lines reading ``obj``'s fields from the struct ``value``, counting into ``c``; returns name → expression."""
    out = src.lines
    present = [f for f in obj.fields if f.presence == fr.REQUIRED or (variant and f.presence == fr.VARIANT)]
    if present:
        out.append(f"{indent}c.keys += {len(present)}")
    strings = [f"{value}.{f.name}.count(':')" for f in present if _is_string(f)]
    if strings:
        out.append(f"{indent}c.colons += " + " + ".join(strings))
    defaults = _defaults(cls)
    exprs: dict[str, str] = {}
    for f in obj.fields:
        read = f"{value}.{f.name}"
        if f.presence == fr.VARIANT and not variant:
            continue
        if f.presence != fr.OPTIONAL:
            expr = _fast_value(src, f, read, json, indent)
            if isinstance(f.kind, (fr.Obj, fr.Many)):  # counted now, before the caller's key check
                out.append(f"{indent}v{len(out)} = {expr}")
                expr = f"v{len(out) - 1}"
            exprs[f.name] = expr
            continue
        x, v = f"x{len(out)}", f"v{len(out)}"
        out += [f"{indent}{x} = {read}", f"{indent}if {x} is UNSET:",
                f"{indent}    {v} = {src.name(defaults[f.name], 'default')}", f"{indent}else:",
                f"{indent}    c.keys += 1"]
        if _is_string(f):
            out.append(f"{indent}    c.colons += {x}.count(':')")
        elif f.kind == "strs":
            out.append(f"{indent}    c.colons += sum([k.count(':') for k in {x}])")
        if f.refuse_default:
            out.append(f"{indent}    if {x} == {src.name(defaults[f.name], 'default')}: raise Decline")
        out.append(f"{indent}    {v} = {_fast_value(src, f, x, json, indent + '    ')}")
        exprs[f.name] = v
    return exprs


def _fast_value(src: _Source, f: fr.Field, read: str, json: dict, indent: str) -> str:
    kind = f.kind
    if isinstance(kind, fr.Many):
        return f"tuple([{src.name(fast_builder(kind.item, False, json), 'build_')}(i, c) for i in {read}])"
    if isinstance(kind, fr.Obj):
        return f"{src.name(fast_builder(kind, f.variant, json), 'build_')}({read}, c)"
    if kind == "counter":
        return f"parse_counter({read})"
    if kind == "time":
        return f"parse_time({read})"
    if kind == "strs":
        return f"tuple({read})"
    if kind == "json":
        src.lines.append(f"{indent}c.fragment = bytes({read})")
        return f"{src.name(json[f.name], 'json_')}(c.fragment)"
    return read


def _positional(cls: type, exprs: dict[str, str], src: _Source) -> str:
    """Constructor arguments in the class's field order (absent variant fields at their default)."""
    defaults = _defaults(cls)
    return ", ".join(exprs.get(n) or src.name(defaults[n], "default") for n in defaults)


@functools.cache
def _fast_builder(obj: fr.Obj, variant: bool, json_items: tuple) -> Callable:
    src = _Source()
    function = f"build_{obj.name}{'_variant' if variant else ''}"
    src.lines.append(f"def {function}(s, c):")
    exprs = _fast_fields(src, obj, variant, "s", obj.cls, dict(json_items), "    ")
    src.lines.append(f"    return {src.name(obj.cls, 'cls_')}({_positional(obj.cls, exprs, src)})")
    return src.compile(function)


def fast_builder(obj: fr.Obj, variant: bool, json: dict[str, Callable[[bytes], Any]]) -> Callable:
    """``build(struct, count) -> value`` for an object with a value class; ``json`` reads its open fields."""
    return _fast_builder(obj, variant, tuple(sorted(json.items())))


def envelope_count(frame: fr.Frame) -> tuple[int, tuple[str, ...]]:
    """The envelope's keys (with the body's key) and the envelope fields whose colons count."""
    strings = ("id",) + tuple(k for k in ("session_id", "reply_to") if getattr(frame, k) == fr.REQUIRED)
    return 2 + len(strings) + 1, strings


def fast_frame(frame: fr.Frame, json: dict[str, Callable[[bytes], Any]],
               keys_add_up: Callable[..., bool]) -> Callable:
    """``build(frame_struct, data) -> message or None`` for a frame whose body sits on the message."""
    if not frame.flat:
        raise TypeError(f"{frame.cls.TYPE}: only a frame whose body sits on the message has a fast builder")
    src = _Source()
    src.names["keys_add_up"] = keys_add_up
    keys, strings = envelope_count(frame)
    colons = " + ".join(f"f.{k}.count(':')" for k in strings)
    src.lines += ["def build_frame(f, data):", f"    c = Count({keys}, {colons})", "    s = f.body"]
    src.names["Count"] = Count
    exprs = _fast_fields(src, frame.body, False, "s", frame.cls, json, "    ")
    exprs.update({k: f"f.{k}" for k in strings})
    src.lines += ["    if not keys_add_up(data, c.keys, c.colons, c.fragment):", "        return None",
                  f"    return {src.name(frame.cls, 'cls_')}({_positional(frame.cls, exprs, src)})"]
    return src.compile("build_frame")


# -- encoders -------------------------------------------------------------------------------------

def _encode_fields(src: _Source, obj: fr.Obj, value: str, cls: type) -> None:
    """Lines adding ``obj``'s fields of ``value`` to the dict ``d``, in wire order."""
    defaults = _defaults(cls)
    for f in obj.fields:
        read = f"{value}.{f.name}"
        if f.presence == fr.REQUIRED:
            src.lines.append(f"    d[{f.name!r}] = {_wire_value(src, f, read)}")
            continue
        default = defaults[f.name]
        test = "is not None" if default is None else f"!= {src.name(default, 'default')}"
        src.lines += [f"    x = {read}", f"    if x {test}:", f"        d[{f.name!r}] = {_wire_value(src, f, 'x')}"]


def _wire_value(src: _Source, f: fr.Field, read: str) -> str:
    kind = f.kind
    if isinstance(kind, fr.Many):
        return f"[{src.name(encoder(kind.item), 'encode_')}(i) for i in {read}]"
    if isinstance(kind, fr.Obj):
        return f"{src.name(encoder(kind), 'encode_')}({read})"
    return {"counter": "str({})", "time": "format_time({})", "json": "Raw(str.encode({}))",
            "strs": "list({})"}.get(kind, "{}").format(read)


@functools.cache
def encoder(obj: fr.Obj) -> Callable[[Any], dict[str, Any]]:
    """``encode(value) -> dict`` for an object with a value class."""
    src = _Source()
    src.lines += [f"def encode_{obj.name}(v):", "    d = {}"]
    _encode_fields(src, obj, "v", obj.cls)
    src.lines.append("    return d")
    return src.compile(f"encode_{obj.name}")


def frame_encoder(frame: fr.Frame) -> Callable[[Any], dict[str, Any]]:
    """``encode(message) -> dict``: the envelope, then the body (flat, a value, or an ack's by its type)."""
    src = _Source()
    src.lines += ["def encode_frame(m):",
                  f"    d = {{'protocol_version': {PROTOCOL_VERSION!r}, 'type': {frame.cls.TYPE!r}, 'id': m.id}}"]
    for key in ("session_id", "reply_to"):
        presence = getattr(frame, key)
        if presence == fr.REQUIRED:
            src.lines.append(f"    d[{key!r}] = m.{key}")
        elif presence == fr.OPTIONAL:
            src.lines += [f"    if m.{key} is not None:", f"        d[{key!r}] = m.{key}"]
    if frame.flat:
        src.lines.append(f"    d[{frame.body_key!r}] = body = {{}}")
        src.lines.append("    d, outer = body, d")
        _encode_fields(src, frame.body, "m", frame.cls)
        src.lines.append("    return outer")
    elif isinstance(frame.body, fr.Obj):
        src.lines += [f"    d[{frame.body_key!r}] = {src.name(encoder(frame.body), 'encode_')}(m.body)", "    return d"]
    else:
        by_type = {obj.cls: encoder(obj) for obj in frame.body}
        src.lines += [f"    d[{frame.body_key!r}] = {src.name(by_type, 'bodies')}[type(m.body)](m.body)",
                      "    return d"]
    return src.compile("encode_frame")
