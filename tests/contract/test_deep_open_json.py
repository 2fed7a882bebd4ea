"""A deeply nested result, payload or ack body is declined by the fast paths and refused by the reference one.

The reference path refuses any frame nested deeper than its depth limit
with ``invalid_json``. The fast paths hand their open JSON (a finish's
``result``, an offer's ``payload``, an ack's ``body``) to msgspec as
``Raw``, which still walks it and raises ``RecursionError`` (not a
``DecodeError``) once the nesting passes the interpreter's recursion
limit, before any depth check of ours runs: the fast paths must decline
it, so the frame gets the reference path's answer and no exception
escapes to the session layer.
"""

from __future__ import annotations

import json

import contract_support as s
from pulse_trio.contract import errors as e
from pulse_trio.contract import messages as m
from pulse_trio.contract.codec import decode_client_frame, decode_server_frame
from pulse_trio.contract.errors import ProtocolError
from pulse_trio.contract.fast_client import try_decode_client
from pulse_trio.contract.fast_server import try_decode_server
from pulse_trio.contract.grammar import new_id, new_secret, parse_time
from pulse_trio.sdk import protocol as p
from pulse_trio.session.server import Reject, ServerSession

DEPTH = 100_000  # 200 KB of brackets: well under the 512 KiB frame limit
DEEP = "[" * DEPTH + "]" * DEPTH


def _splice(frame: dict, path: tuple[str, ...]) -> str:
    """The frame's compact text with the value at ``path`` replaced by DEEP."""
    marker = "__DEEP__"
    node = frame
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = marker
    text = json.dumps(frame, separators=(",", ":"))
    return text.replace(f'"{marker}"', DEEP)


FINISH = _splice(s.finish(), ("body", "result"))
OFFER = _splice(s.assign(), ("body", "task", "payload"))
ACK = _splice(s.ack_renew(), ("body",))


def _reference_code(decode, text: str) -> str:
    try:
        decode(text)
    except ProtocolError as exc:
        return exc.code
    raise AssertionError("the reference path accepted a frame nested 100000 levels deep")


def test_fast_client_declines_a_deep_result():
    assert len(FINISH.encode()) < 524_288
    assert _reference_code(decode_client_frame, FINISH) == e.INVALID_JSON
    assert try_decode_client(FINISH.encode()) is None


def test_server_session_refuses_a_deep_result_with_invalid_json():
    session = ServerSession(s.SESSION)
    event = session.receive(FINISH.encode())
    assert type(event) is Reject and event.code == e.INVALID_JSON


def test_fast_server_declines_a_deep_payload_and_a_deep_ack_body():
    assert _reference_code(decode_server_frame, OFFER) == e.INVALID_JSON
    assert _reference_code(decode_server_frame, ACK) == e.INVALID_JSON
    assert try_decode_server(OFFER.encode(), lambda reply_to: None) is None
    assert try_decode_server(ACK.encode(), lambda reply_to: "task.renew") is None


def test_sdk_protocol_reports_a_deep_offer_as_broken():
    hello = m.WorkerHello(id="h1", worker_name="w", subscriptions=(m.Subscription("billing"),))
    welcome = m.WorkerWelcome(id="s-1", session_id=s.SESSION, reply_to="h1", body=m.Welcome(
        instance_id=new_id("ins_"), instance_secret=new_secret(), epoch=42, capacity=0, drain=False,
        active_leases=0, lease_ttl_ms=30000, start_timeout_ms=30000, limits=m.ServerLimits(),
        server_time=parse_time(s.T0)))
    proto = p.ClientProtocol(welcome, hello, strict=True)
    event = proto.receive(OFFER.encode())
    assert type(event) is p.Broken, event
