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
