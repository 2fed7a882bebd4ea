"""The one declaration of every frame (``contract/frames.py``) and what is made from it."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

import contract_support as s
from pulse_trio.contract import derive
from pulse_trio.contract import frames as fr
from pulse_trio.contract import messages as m
from pulse_trio.contract.codec import decode_client_frame, decode_server_frame
from pulse_trio.contract.encoder import encode


def _with_body(cls: type, body: fr.Obj) -> dict[type, fr.Frame]:
    return {**fr.FRAMES, cls: dataclasses.replace(fr.FRAMES[cls], body=body)}


def test_a_field_declared_but_not_on_the_message_fails_at_import() -> None:
    body = dataclasses.replace(fr.CAPACITY_BODY, fields=fr.CAPACITY_BODY.fields + (fr.F("note", "str", fr.OPTIONAL),))
    with pytest.raises(TypeError, match="WorkerCapacity"):
        fr.check(_with_body(m.WorkerCapacity, body))


def test_a_message_field_not_declared_fails_at_import() -> None:
    body = dataclasses.replace(fr.CANCEL_BODY, fields=fr.CANCEL_BODY.fields[:-1])  # no reason
    with pytest.raises(TypeError, match="TaskCancel"):
        fr.check(_with_body(m.TaskCancel, body))


def test_an_optional_wire_field_needs_a_default_on_the_message() -> None:
    fields = tuple(dataclasses.replace(f, presence=fr.OPTIONAL) if f.name == "drain" else f
                   for f in fr.CAPACITY_BODY.fields)
    with pytest.raises(TypeError, match="drain is optional on the wire"):
        fr.check(_with_body(m.WorkerCapacity, dataclasses.replace(fr.CAPACITY_BODY, fields=fields)))


def test_every_message_type_is_declared_once() -> None:
    table = dict(fr.FRAMES)
    del table[m.TaskRenew]
    with pytest.raises(TypeError, match="every message type"):
        fr.check(table)
    fr.check(fr.FRAMES)


def test_the_encoder_writes_each_object_in_its_declared_order() -> None:
    # Every example is canonical, so its keys show the wire order; the declaration must say the same.
    for name, build in {**s.CLIENT_EXAMPLES, **s.SERVER_EXAMPLES}.items():
        frame = build()
        decode = decode_client_frame if name in s.CLIENT_EXAMPLES else decode_server_frame
        assert encode(decode(s.dumps(frame))) == s.dumps(frame), name
    assert [f.name for f in fr.LEASE.fields][:3] == ["lease_id", "task_id", "lease_secret"]


def test_a_struct_is_closed_and_takes_its_variant() -> None:
    lease = s.lease_body(secret=True, state="OFFERED")
    with pytest.raises(msgspec.ValidationError, match="lease_secret"):
        msgspec.json.decode(s.dumps(lease), type=derive.struct(fr.LEASE))
    offered = msgspec.json.decode(s.dumps(lease), type=derive.struct(fr.LEASE, True))
    assert offered.lease_secret == lease["lease_secret"]


# -- the declaration is the published schema's -------------------------------------------------------

#: Each object ``$defs`` entry: the declared object, and whether its variant fields are required there
#: and listed there (the schema's ``welcome`` lists ``instance_secret``; ``lease`` leaves ``lease_secret`` out).
OBJECT_DEFS: dict[str, tuple[fr.Obj, bool, bool]] = {
    "helloBody": (fr.HELLO_BODY, False, False), "subscription": (fr.SUBSCRIPTION, False, False),
    "clientInfo": (fr.CLIENT_INFO, False, False), "capacityBody": (fr.CAPACITY_BODY, False, False),
    "resumeBody": (fr.RESUME_BODY, False, False), "leaseCommandBody": (fr.COMMAND_BODY, False, False),
    "finishBody": (fr.FINISH_BODY, False, False), "welcome": (fr.WELCOME, False, True),
    "limits": (fr.LIMITS, False, False), "lease": (fr.LEASE, False, False), "assignedLease": (fr.LEASE, True, True),
    "receipt": (fr.RECEIPT, False, False), "commandResult": (fr.COMMAND_RESULT, False, False),
    "assignedTask": (fr.TASK, False, False), "assignmentBody": (fr.ASSIGN_BODY, False, False),
    "cancellationBody": (fr.CANCEL_BODY, False, False), "error": (fr.ERROR_BODY, False, False),
}
FRAME_DEFS = {
    "helloFrame": m.WorkerHello, "capacityFrame": m.WorkerCapacity, "resumeFrame": m.WorkerResume,
    "startFrame": m.TaskStart, "renewFrame": m.TaskRenew, "finishFrame": m.TaskFinish,
    "welcomeFrame": m.WorkerWelcome, "assignmentFrame": m.TaskAssign, "cancellationFrame": m.TaskCancel,
    "ackFrame": m.Ack, "errorFrame": m.Error,
}
_JSON_TYPES = {"str": "string", "counter": "string", "time": "string", "int": "integer", "bool": "boolean",
               "json": None, "strs": "array"}


def _def_of(obj: fr.Obj, variant: bool) -> str:
    return next(name for name, (o, v, _) in OBJECT_DEFS.items() if o is obj and v == variant)


def _resolved(node: dict) -> dict:
    while "$ref" in node:
        node = s.schema()["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _json_type(node: dict) -> str | None:
    node = _resolved(node)
    if "type" in node:
        return node["type"]
    if "enum" in node or "const" in node:
        kinds = {{str: "string", bool: "boolean"}.get(type(v)) for v in node.get("enum", [node.get("const")])}
        return kinds.pop() if len(kinds) == 1 else None
    if "anyOf" in node:
        kinds = {_json_type(branch) for branch in node["anyOf"]}
        return kinds.pop() if len(kinds) == 1 else None
    return None  # any JSON value: a payload, a result


@pytest.mark.parametrize("name", sorted(OBJECT_DEFS))
def test_each_declared_object_has_the_schema_fields_in_wire_order(name: str) -> None:
    obj, variant, listed = OBJECT_DEFS[name]
    schema = s.schema()["$defs"][name]
    assert list(schema["properties"]) == [f.name for f in obj.fields if f.presence != fr.VARIANT or listed]
    assert set(schema["required"]) == set(obj.names(variant)[0])
    for f in obj.fields:
        if f.name not in schema["properties"]:
            continue
        prop = schema["properties"][f.name]
        if isinstance(f.kind, fr.Obj):
            assert prop["$ref"] == f"#/$defs/{_def_of(f.kind, f.variant)}", f.name
        elif isinstance(f.kind, fr.Many):
            assert prop["type"] == "array" and prop["maxItems"] == f.kind.most, f.name
            assert prop["items"]["$ref"] == f"#/$defs/{_def_of(f.kind.item, False)}", f.name
        else:
            assert _json_type(prop) == _JSON_TYPES[f.kind], f.name
            if f.kind in ("counter", "time"):
                assert prop["$ref"] == f"#/$defs/{f.kind}", f.name
            if f.kind == "strs":
                assert prop["maxItems"] == f.most and _json_type(prop["items"]) == "string", f.name


@pytest.mark.parametrize("name", sorted(FRAME_DEFS))
def test_each_declared_envelope_is_the_schema_frame(name: str) -> None:
    frame = fr.FRAMES[FRAME_DEFS[name]]
    schema = s.schema()["$defs"][name]
    required, optional = frame.envelope()
    assert set(schema["required"]) == set(required) and set(schema["properties"]) == set(required + optional)
    assert schema["properties"]["type"] == {"const": frame.cls.TYPE}
    body = schema["properties"][frame.body_key]
    if isinstance(frame.body, tuple):  # an ack: one of the declared bodies
        refs = [branch["$ref"] for branch in s.schema()["$defs"]["ackBody"]["oneOf"]]
        assert refs == [f"#/$defs/{_def_of(obj, False)}" for obj in frame.body]
    else:
        assert body["$ref"] == f"#/$defs/{_def_of(frame.body, False)}"
        assert ("instance_secret" in body.get("required", ())) == frame.variant
