"""Every frame of pulse.worker.v1, declared once: its envelope and each object's fields in wire order.

This table is what the other layers are made from, when the package is
imported (never per frame):

* the reference decoders' closed shapes and the order they read fields in
  (``readers.Shape``, ``readers.fields``);
* the msgspec structs of the fast decoders and their builders
  (``derive.struct``, ``derive.fast_builder``);
* the encoder (``derive.encoder``).

The typed messages (``messages``, ``bodies``) stay hand-written, since they
carry the value rules; :func:`_check` holds them to this table at import:
the same field names, an optional wire field exactly where the class has a
default (the value the encoder omits), so adding a field in one place only
fails loudly. The published schema is held to the decoders by the contract
tests.

Declarations compare and hash by identity (``eq=False``): each is one
object, and the caches keyed by them must not walk their fields per frame.

Field kinds: ``str``, ``counter`` (a decimal string, an ``int`` in the
message), ``int``, ``bool``, ``time`` (RFC 3339 text, an aware ``datetime``),
``json`` (open JSON kept as text: a result or a payload), ``strs`` (an
array of strings), an :class:`Obj`, or a :class:`Many` of one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Union

from . import bodies as b
from . import limits as lim
from . import messages as m

REQUIRED = "required"
OPTIONAL = "optional"  # omitted at the class's default
VARIANT = "variant"  # required in one use of the object (an offer's secret), refused in the others
ABSENT = "absent"  # an envelope field this frame never carries

SCALARS = ("str", "counter", "int", "bool", "time", "json", "strs")
#: Kinds whose wire value is a JSON string (their colons count in the fast path's key check).
STRING_KINDS = ("str", "counter", "time")


@dataclass(frozen=True, slots=True, eq=False)
class Many:
    """A JSON array of 1..``most`` objects."""

    item: Obj
    most: int


@dataclass(frozen=True, slots=True, eq=False)
class Field:
    name: str  # the wire key and the attribute
    kind: Union[str, Obj, Many]
    presence: str = REQUIRED
    most: int = 0  # the length bound of a ``strs`` array
    #: Optional, and never sent at its default: the reason a frame that shows the default is refused.
    refuse_default: str | None = None
    #: An object field read in its variant (the offer's lease, the welcome's secret).
    variant: bool = False


@dataclass(frozen=True, slots=True, eq=False)
class Obj:
    """One closed JSON object; ``cls`` is its value type, or None when its fields sit on the message itself."""

    name: str
    cls: type | None
    fields: tuple[Field, ...]

    def names(self, variant: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Required and optional keys: required in wire order, then the variant's, as the decoders ask for them."""
        required = tuple(f.name for f in self.fields if f.presence == REQUIRED)
        if variant:
            required += tuple(f.name for f in self.fields if f.presence == VARIANT)
        return required, tuple(f.name for f in self.fields if f.presence == OPTIONAL)

    def read_order(self, first: tuple[str, ...] = ()) -> tuple[Field, ...]:
        """The reference decoders' order: ``first``, refused defaults, required, variant, optional."""
        by_name = {f.name: f for f in self.fields}
        head = [by_name[n] for n in first] + [f for f in self.fields if f.refuse_default and f.name not in first]
        rest = [f for p in (REQUIRED, VARIANT, OPTIONAL) for f in self.fields if f.presence == p and f not in head]
        return tuple(head + rest)


@dataclass(frozen=True, slots=True, eq=False)
class Frame:
    """A message type's envelope: which of ``session_id`` / ``reply_to`` it carries, and its body."""

    cls: type
    session_id: str
    reply_to: str
    body_key: str  # "body", or "error" for an error frame
    body: Obj | tuple[Obj, ...]  # flat on the message, or the value(s) of its ``body`` attribute
    variant: bool = False  # a body value read in its variant (the welcome's secret)

    @property
    def flat(self) -> bool:
        return isinstance(self.body, Obj) and self.body.cls is None

    def envelope(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Required and optional top-level keys, in wire order."""
        required, optional = ["protocol_version", "type", "id"], []
        for key in ("session_id", "reply_to"):
            presence = getattr(self, key)
            if presence == REQUIRED:
                required.append(key)
            elif presence == OPTIONAL:
                optional.append(key)
        return (*required, self.body_key), tuple(optional)


def F(name: str, kind: Union[str, Obj, Many] = "str", presence: str = REQUIRED, **more) -> Field:
    return Field(name, kind, presence, **more)


# -- the objects, fields in wire order (docs/protocol.md §4) ---------------------------------------

SUBSCRIPTION = Obj("subscription", b.Subscription, (F("queue"), F("kinds", "strs", OPTIONAL, most=lim.MAX_KINDS)))
CLIENT_INFO = Obj("client", b.ClientInfo, (F("name"), F("version")))
HELLO_BODY = Obj("hello", None, (
    F("worker_name"), F("subscriptions", Many(SUBSCRIPTION, lim.MAX_SUBSCRIPTIONS)),
    F("cancellation_notifications", "bool", OPTIONAL), F("concurrency_keys", "bool", OPTIONAL),
    F("client", CLIENT_INFO, OPTIONAL),
))
CAPACITY_BODY = Obj("capacity", None, (F("sequence", "counter"), F("capacity", "int"), F("drain", "bool")))
RESUME_BODY = Obj("resume", None, (
    F("instance_id"), F("instance_secret"), F("task_id"), F("lease_id"), F("lease_secret"),
))
_COMMAND = (F("task_id"), F("lease_id"), F("lease_secret"), F("revision", "counter"))
COMMAND_BODY = Obj("command", None, _COMMAND)
FINISH_BODY = Obj("finish", None, _COMMAND + (
    F("status"), F("result", "json"), F("error_code", "str", OPTIONAL), F("error_message", "str", OPTIONAL),
    F("retryable", "bool", OPTIONAL),
))

LIMITS = Obj("limits", b.ServerLimits, (F("max_frame_bytes", "int"), F("max_result_bytes", "int")))
WELCOME = Obj("welcome", b.Welcome, (
    F("instance_id"), F("instance_secret", "str", VARIANT), F("epoch", "counter"), F("sequence", "counter", OPTIONAL),
    F("capacity", "int"), F("drain", "bool"), F("active_leases", "int"), F("lease_ttl_ms", "int"),
    F("start_timeout_ms", "int"), F("limits", LIMITS), F("server_time", "time"),
))
LEASE = Obj("lease", b.Lease, (
    F("lease_id"), F("task_id"), F("lease_secret", "str", VARIANT), F("revision", "counter"), F("epoch", "counter"),
    F("state"), F("expires_at", "time"), F("cancel_requested_at", "time", OPTIONAL),
))
RECEIPT = Obj("receipt", b.Receipt, (
    F("command"), F("task_id"), F("lease_id"), F("revision", "counter"), F("committed_at", "time"),
    F("duplicate", "bool"),
))
COMMAND_RESULT = Obj("command_result", b.CommandResult, (F("receipt", RECEIPT), F("lease", LEASE, OPTIONAL)))
TASK = Obj("task", b.AssignedTask, (
    F("task_id"), F("queue"), F("kind"), F("payload", "json"), F("attempt", "int"), F("max_attempts", "int"),
    F("idempotency_key"), F("created_at", "time"), F("due_at", "time"),
    F("priority", "int", OPTIONAL, refuse_default="must be 1..9 (the default 0 is omitted)"),
    F("concurrency_key", "str", OPTIONAL), F("concurrency_token", "counter", OPTIONAL),
    F("effect_uncertain", "bool", OPTIONAL, refuse_default="is only sent as true (omitted otherwise)"),
    F("retry_of", "str", OPTIONAL),
))
ASSIGN_BODY = Obj("assign", None, (F("task", TASK), F("lease", LEASE, variant=True)))
CANCEL_BODY = Obj("cancel", None, (
    F("task_id"), F("lease_id"), F("cancel_requested_at", "time"), F("grace_expires_at", "time"),
    F("reason", "str", OPTIONAL),
))
ERROR_BODY = Obj("error", None, (
    F("code"), F("message"), F("fatal", "bool"), F("retry_after_ms", "int", OPTIONAL),
))

#: The body each ack answers with, by value type (``messages.ACK_BODY_FOR`` says which request gets which).
ACK_BODIES: dict[type, Obj] = {b.Welcome: WELCOME, b.Lease: LEASE, b.CommandResult: COMMAND_RESULT}

FRAMES: dict[type, Frame] = {
    m.WorkerHello: Frame(m.WorkerHello, ABSENT, ABSENT, "body", HELLO_BODY),
    m.WorkerCapacity: Frame(m.WorkerCapacity, REQUIRED, ABSENT, "body", CAPACITY_BODY),
    m.WorkerResume: Frame(m.WorkerResume, REQUIRED, ABSENT, "body", RESUME_BODY),
    m.TaskStart: Frame(m.TaskStart, REQUIRED, ABSENT, "body", COMMAND_BODY),
    m.TaskRenew: Frame(m.TaskRenew, REQUIRED, ABSENT, "body", COMMAND_BODY),
    m.TaskFinish: Frame(m.TaskFinish, REQUIRED, ABSENT, "body", FINISH_BODY),
    m.WorkerWelcome: Frame(m.WorkerWelcome, REQUIRED, REQUIRED, "body", WELCOME, variant=True),
    m.TaskAssign: Frame(m.TaskAssign, REQUIRED, ABSENT, "body", ASSIGN_BODY),
    m.TaskCancel: Frame(m.TaskCancel, REQUIRED, ABSENT, "body", CANCEL_BODY),
    m.Ack: Frame(m.Ack, REQUIRED, REQUIRED, "body", tuple(ACK_BODIES.values())),
    m.Error: Frame(m.Error, OPTIONAL, OPTIONAL, "error", ERROR_BODY),
}


# -- held against the message classes at import ----------------------------------------------------

def _attributes(cls: type) -> dict[str, object]:
    """A dataclass's fields and their defaults (``MISSING`` when required)."""
    return {f.name: f.default for f in dataclasses.fields(cls)}


def _same(where: str, declared: dict[str, bool], cls: type) -> None:
    """``declared`` maps each wire field to whether it is optional (the class must then give a default)."""
    actual = _attributes(cls)
    if set(declared) != set(actual):
        raise TypeError(f"frames.{where}: the fields {sorted(declared)} are not {cls.__name__}'s {sorted(actual)}")
    for name, optional in declared.items():
        if optional and actual[name] is dataclasses.MISSING:
            raise TypeError(f"frames.{where}: {cls.__name__}.{name} is optional on the wire, so it needs the "
                            "default the encoder omits")


def _objects(obj: Obj, seen: dict[str, Obj]) -> dict[str, Obj]:
    seen[obj.name] = obj
    for f in obj.fields:
        child = f.kind.item if isinstance(f.kind, Many) else f.kind
        if isinstance(child, Obj):
            _objects(child, seen)
        elif child not in SCALARS:
            raise TypeError(f"frames.{obj.name}.{f.name}: unknown kind {child!r}")
        if f.refuse_default and f.presence != OPTIONAL:
            raise TypeError(f"frames.{obj.name}.{f.name}: only an optional field can refuse its default")
    return seen


def _body(obj: Obj) -> dict[str, bool]:
    return {f.name: f.presence != REQUIRED for f in obj.fields}


def check(table: dict[type, Frame]) -> None:
    """Raise TypeError where the table and the message classes disagree (run on ``FRAMES`` at import)."""
    if set(table) != set(m.CLIENT_TYPES.values()) | set(m.SERVER_TYPES.values()):
        raise TypeError("frames.FRAMES must declare every message type, once")
    objects: dict[str, Obj] = {}
    for frame in table.values():
        envelope = {"id": False}
        for key in ("session_id", "reply_to"):
            if getattr(frame, key) != ABSENT:
                envelope[key] = getattr(frame, key) == OPTIONAL
        for obj in frame.body if isinstance(frame.body, tuple) else (frame.body,):
            _objects(obj, objects)
        wire = {**envelope, **(_body(frame.body) if frame.flat else {"body": False})}
        _same(frame.cls.TYPE, wire, frame.cls)
    for obj in objects.values():
        if obj.cls is not None:
            _same(obj.name, _body(obj), obj.cls)


check(FRAMES)
