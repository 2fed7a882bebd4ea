"""Schema and application decoder, side by side, on one table of frames.

Every row is run through BOTH the JSON Schema (the direction's ``$defs``
entry, format assertion on) and the decoder the server / SDK really uses,
and each verdict is asserted. ``schema`` is "valid", "invalid", or
"unparsed" (a lenient ``json.loads`` already refuses the text); ``code`` is
the decoder's error code, or None for accepted. Rows the schema cannot
judge are marked ``runtime-only``: there the runtime is the only guard, and
the row proves it answers with the right code.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import contract_support as s
from pulse_trio.contract.codec import decode_client_frame, decode_server_frame
from pulse_trio.contract.errors import FrameTooLarge, ProtocolError

RUNTIME_ONLY = "runtime-only"


@dataclass(frozen=True)
class Row:
    name: str
    direction: str  # "client" (decoded by the server) or "server" (by the SDK)
    text: str
    schema: str  # "valid" | "invalid" | "unparsed"
    code: str | None  # None: the decoder accepts
    where: str | None = None  # substring the error message must contain
    note: str = ""


ROWS: list[Row] = []


def row(name, direction, frame, schema, code, where=None, note=""):
    text = frame if isinstance(frame, str) else s.dumps(frame)
    ROWS.append(Row(name, direction, text, schema, code, where, note))


def bad(name, direction, frame, where=None):
    """Invalid for both: the schema rejects, the decoder says invalid_frame."""
    row(name, direction, frame, "invalid", "invalid_frame", where)


def runtime(name, direction, frame, code, where=None, schema="valid"):
    row(name, direction, frame, schema, code, where, RUNTIME_ONLY)


C, S = "client", "server"

# -- valid frames of every type, both directions ---------------------------------

for name, build in s.CLIENT_EXAMPLES.items():
    row(f"valid {name}", C, build(), "valid", None)
for name, build in s.SERVER_EXAMPLES.items():
    row(f"valid {name}", S, build(), "valid", None)

row("valid hello, minimal", C, s.drop(s.drop(s.drop(s.hello(), "body.client"), "body.concurrency_keys"),
                                      "body.cancellation_notifications"), "valid", None)
row("valid capacity 0, drain false written out", C, s.put(s.capacity(), "body.capacity", 0), "valid", None)
row("valid capacity 10000, drain true", C, s.put(s.put(s.capacity(), "body.capacity", 10000), "body.drain", True),
    "valid", None)
row("valid capacity -0 (integer token equal to 0)", C, s.dumps(s.capacity()).replace('"capacity":8', '"capacity":-0'),
    "valid", None)
row("valid sequence uint64 max", C, s.put(s.capacity(), "body.sequence", "18446744073709551615"), "valid", None)
row("valid finish SUCCEEDED error_code empty", C, s.finish(error_code=""), "valid", None)
for status in ("FAILED", "UNKNOWN", "CANCELLED"):
    row(f"valid finish {status}", C, s.finish(status), "valid", None)
row("valid finish FAILED retryable", C, s.finish("FAILED", retryable=True), "valid", None)
row("valid finish SUCCEEDED retryable false", C, s.finish(retryable=False), "valid", None)
for label, result in (("string", "ok"), ("zero", 0), ("false", False), ("array", []), ("1.5e308", 1.5e308)):
    row(f"valid finish result {label}", C, s.put(s.finish(), "body.result", result), "valid", None)
row("valid finish error_message 4096 chars", C, s.finish("FAILED", error_message="x" * 4096), "valid", None)
row("valid worker_name 128 chars", C, s.put(s.hello(), "body.worker_name", "w" * 128), "valid", None)
row("valid worker_name unicode and a surrogate pair", C, '{"protocol_version":"1","type":"worker.hello","id":"h1",'
    '"body":{"worker_name":"caf\\u00e9 \\ud83d\\ude00","subscriptions":[{"queue":"q"}]}}', "valid", None)
row("valid queue 64 chars", C, s.put(s.hello(), "body.subscriptions[0].queue", "q" * 64), "valid", None)
row("valid welcome with sequence", S, s.put(s.welcome(), "body.sequence", "7"), "valid", None)
row("valid time without fraction", S, s.put(s.welcome(), "body.server_time", "2026-12-02T12:00:00Z"), "valid", None)
row("valid time leap day", S, s.put(s.welcome(), "body.server_time", "2024-02-29T23:59:59.5Z"), "valid", None)
row("valid assign priority 1", S, s.put(s.assign(), "body.task.priority", 1), "valid", None)
row("valid assign priority 9", S, s.put(s.assign(), "body.task.priority", 9), "valid", None)
row("valid assign payload null", S, s.put(s.assign(), "body.task.payload", None), "valid", None)
row("valid cancel without reason", S, s.drop(s.cancel(), "body.reason"), "valid", None)
row("valid error refusing registration (no session_id)", S, s.error(session_id=None, reply_to="h1"), "valid", None)
row("valid unsolicited error (no reply_to)", S,
    s.error(reply_to=None, error={"code": "server_shutting_down", "message": "bye", "fatal": True}), "valid", None)
row("valid internal error with retry_after_ms", S,
    s.error(error={"code": "internal", "message": "", "fatal": False, "retry_after_ms": 250}), "valid", None)

# -- field aliases, including inside array items ----------------------------------

bad("alias subscriptions[0].Queue", C, s.rename(s.hello(), "body.subscriptions[0].queue", "Queue"),
    "body.subscriptions[0]: unknown field 'Queue'")
bad("alias subscriptions[1].queueName", C, s.rename(s.hello(), "body.subscriptions[1].queue", "queueName"),
    "body.subscriptions[1]: unknown field 'queueName'")
bad("alias kept beside the real field", C, s.put(s.hello(), "body.subscriptions[0].Queue", "billing"),
    "body.subscriptions[0]: unknown field 'Queue'")
bad("alias workerName", C, s.rename(s.hello(), "body.worker_name", "workerName"), "body: unknown field")
bad("alias sessionId", C, s.rename(s.capacity(), "session_id", "sessionId"), "frame: unknown field")
bad("alias leaseSecret", C, s.rename(s.start(), "body.lease_secret", "leaseSecret"), "body: unknown field")
bad("alias task.taskId", S, s.rename(s.assign(), "body.task.task_id", "taskId"), "body.task: unknown field")
bad("alias receipt.committedAt", S, s.rename(s.ack_renew(), "body.receipt.committed_at", "committedAt"),
    "body.receipt: unknown field")
bad("unknown top-level field", C, s.put(s.capacity(), "extra", 1), "frame: unknown field 'extra'")

# -- missing fields (no zero value is ever implied) -------------------------------

for field in ("sequence", "capacity", "drain"):
    bad(f"capacity without {field}", C, s.drop(s.capacity(), f"body.{field}"), f"missing required field '{field}'")
for field in ("worker_name", "subscriptions"):
    bad(f"hello without {field}", C, s.drop(s.hello(), f"body.{field}"), field)
for field in ("instance_id", "instance_secret", "task_id", "lease_id", "lease_secret"):
    bad(f"resume without {field}", C, s.drop(s.resume(), f"body.{field}"), field)
for field in ("task_id", "lease_id", "lease_secret", "revision"):
    bad(f"renew without {field}", C, s.drop(s.renew(), f"body.{field}"), field)
bad("finish without status", C, s.drop(s.finish(), "body.status"), "status")
bad("finish without result", C, s.drop(s.finish(), "body.result"), "result")
bad("client frame without id", C, s.drop(s.start(), "id"), "'id'")
bad("client frame without body", C, s.drop(s.start(), "body"), "'body'")
bad("client frame without type", C, s.drop(s.start(), "type"), "'type'")
row("client frame without session_id", C, s.drop(s.start(), "session_id"), "invalid", "invalid_frame",
    "session_id", note="the session layer answers session_mismatch first")
for field in ("epoch", "capacity", "drain", "active_leases", "lease_ttl_ms", "start_timeout_ms", "limits",
              "server_time", "instance_secret"):
    bad(f"welcome without {field}", S, s.drop(s.welcome(), f"body.{field}"), field)
bad("welcome without reply_to", S, s.drop(s.welcome(), "reply_to"), "reply_to")
bad("ack without session_id", S, s.drop(s.ack_renew(), "session_id"), "session_id")
bad("receipt without duplicate", S, s.drop(s.ack_renew(), "body.receipt.duplicate"), "duplicate")
bad("assign without lease_secret", S, s.drop(s.assign(), "body.lease.lease_secret"), "lease_secret")
bad("assign without payload", S, s.drop(s.assign(), "body.task.payload"), "payload")
bad("error without fatal", S, s.drop(s.error(), "error.fatal"), "fatal")
bad("error without message", S, s.drop(s.error(), "error.message"), "message")

# -- response-only fields in requests, and hello's envelope -----------------------

for value, label in (("", "empty"), ("h0", "an id"), (None, "null")):
    bad(f"request with reply_to {label}", C, s.put(s.capacity(), "reply_to", value), "reply_to: response-only")
    bad(f"hello with reply_to {label}", C, s.put(s.hello(), "reply_to", value), "reply_to: response-only")
for value, label in ((None, "null"), ({}, "{}"), ({"code": "x", "message": "", "fatal": False}, "an error")):
    bad(f"request with error {label}", C, s.put(s.renew(), "error", value), "error: response-only")
bad("hello with session_id", C, s.put(s.hello(), "session_id", s.SESSION), "session_id: not sent in worker.hello")
bad("assign with reply_to", S, s.put(s.assign(), "reply_to", "x"), "frame: unknown field 'reply_to'")
bad("cancel with reply_to", S, s.put(s.cancel(), "reply_to", "x"), "frame: unknown field 'reply_to'")
bad("error frame with body", S, s.put(s.error(), "body", {}), "frame: unknown field 'body'")

# -- wrong direction ---------------------------------------------------------------

for name, build in s.CLIENT_EXAMPLES.items():
    bad(f"client {name} decoded as a server frame", S, build(), "is never sent by the server")
for name, build in s.SERVER_EXAMPLES.items():
    bad(f"server {name} decoded as a client frame", C, build(), "is never sent by a worker")
bad("unknown type", C, s.put(s.start(), "type", "task.pause"), "unknown message type")
bad("type with other case", C, s.put(s.hello(), "type", "Worker.Hello"), "unknown message type")
bad("type not a string", C, s.put(s.start(), "type", 1), "type: must be a string")

# -- envelope grammar and version ----------------------------------------------------

for value in ("", "x" * 65, "-a", "h 1", "h1\n", "h\u00e91"):
    bad(f"message id {value!r}", C, s.put(s.start(), "id", value), "id")
row("message id 64 chars", C, s.put(s.start(), "id", "a" + "._:-" * 15 + "bcd"), "valid", None)
bad("session_id lower-case", C, s.put(s.start(), "session_id", s.SESSION.lower().replace("ses_", "ses_")),
    "session_id")
bad("session_id ULID over 128 bits", C, s.put(s.start(), "session_id", "ses_8" + s.SESSION[5:]), "session_id")
bad("session_id with I (not Crockford)", C, s.put(s.start(), "session_id", s.SESSION[:-1] + "I"), "session_id")
bad("session_id of another kind", C, s.put(s.start(), "session_id", s.INSTANCE), "session_id")
for value, label in (("2", "2"), (1, "number 1"), (None, "null")):
    row(f"protocol_version {label}", C, s.put(s.start(), "protocol_version", value), "invalid", "unsupported_version",
        "protocol_version")
row("protocol_version missing", C, s.drop(s.start(), "protocol_version"), "invalid", "unsupported_version")
row("frame is an array", C, "[]", "invalid", "unsupported_version")
row("version beats other problems", C, s.put(s.drop(s.capacity(), "body"), "protocol_version", "0"), "invalid",
    "unsupported_version")

# -- capacity bounds and JSON integers -------------------------------------------------

for value in (-1, 10001, True, "8", 8.5, None):
    bad(f"capacity {value!r}", C, s.put(s.capacity(), "body.capacity", value), "body.capacity")
for token in ("1.0", "1e0", "8E0", "0.0", "1.0e1"):
    runtime(f"capacity {token} (not an integer token)", C,
            s.dumps(s.capacity()).replace('"capacity":8', f'"capacity":{token}'), "invalid_frame", "body.capacity")
runtime("attempt 2.0 (not an integer token)", S, s.dumps(s.assign()).replace('"attempt":2', '"attempt":2.0'),
        "invalid_frame", "body.task.attempt")
runtime("priority 7e0 (not an integer token)", S, s.dumps(s.assign()).replace('"priority":7', '"priority":7e0'),
        "invalid_frame", "body.task.priority")
bad("drain as a string", C, s.put(s.capacity(), "body.drain", "false"), "body.drain")
bad("drain null", C, s.put(s.capacity(), "body.drain", None), "body.drain")
bad("cancellation_notifications 1", C, s.put(s.hello(), "body.cancellation_notifications", 1), "cancellation")

# -- counters -----------------------------------------------------------------------------

for value in ("0", "01", "+1", "-1", "1e3", " 1", "1 ", "1\n", "18446744073709551616", "99999999999999999999",
              "184467440737095516150", "", "\uff11", "0x1"):
    bad(f"sequence {value!r}", C, s.put(s.capacity(), "body.sequence", value), "body.sequence")
bad("sequence as a number", C, s.put(s.capacity(), "body.sequence", 1), "body.sequence")
bad("revision 0", C, s.put(s.renew(), "body.revision", "0"), "body.revision")
bad("revision overflow", C, s.put(s.start(), "body.revision", "18446744073709551616"), "body.revision")
bad("epoch with leading zero", S, s.put(s.welcome(), "body.epoch", "042"), "body.epoch")
bad("concurrency_token 0", S, s.put(s.assign(), "body.task.concurrency_token", "0"), "concurrency_token")

# -- secrets ---------------------------------------------------------------------------------

_SECRET = s.SECRET_B
for value, label in ((_SECRET[:-1], "42 chars"), (_SECRET + "A", "44 chars"), (_SECRET[:-1] + "=", "padding"),
                     (_SECRET[:-2] + "+" + _SECRET[-1], "a +"), (_SECRET[:-2] + "/" + _SECRET[-1], "a /"),
                     (_SECRET[:-1] + "B", "last char with set low bits"), (_SECRET[:-1] + "_", "last char _"),
                     (_SECRET + "=", "43 chars and padding")):
    bad(f"lease_secret {label}", C, s.put(s.start(), "body.lease_secret", value), "body.lease_secret")
    bad(f"instance_secret {label}", C, s.put(s.resume(), "body.instance_secret", value), "body.instance_secret")
bad("welcome instance_secret non-canonical", S, s.put(s.welcome(), "body.instance_secret", _SECRET[:-1] + "Z"),
    "instance_secret")

# -- hello contents ------------------------------------------------------------------------------

bad("no subscriptions", C, s.put(s.hello(), "body.subscriptions", []), "body.subscriptions")
bad("65 subscriptions", C, s.put(s.hello(), "body.subscriptions", [{"queue": f"q{i}"} for i in range(65)]),
    "body.subscriptions")
bad("empty kinds", C, s.put(s.hello(), "body.subscriptions[0].kinds", []), "kinds")
bad("repeated kind", C, s.put(s.hello(), "body.subscriptions[0].kinds", ["a", "a"]), "kinds")
bad("upper-case kind", C, s.put(s.hello(), "body.subscriptions[0].kinds[0]", "Invoice"), "kinds[0]")
bad("queue empty", C, s.put(s.hello(), "body.subscriptions[0].queue", ""), "body.subscriptions[0].queue")
bad("queue 65 chars", C, s.put(s.hello(), "body.subscriptions[0].queue", "q" * 65), "body.subscriptions[0].queue")
bad("queue with a trailing newline", C, s.put(s.hello(), "body.subscriptions[0].queue", "billing\n"), "queue")
bad("subscription not an object", C, s.put(s.hello(), "body.subscriptions[0]", "billing"), "subscriptions[0]")
runtime("the same queue twice", C, s.put(s.hello(), "body.subscriptions[1].queue", "billing"), "invalid_frame",
        "must not repeat a queue")
for value, label in (("", "empty"), ("w" * 129, "129 chars"), ("a\nb", "a newline"), ("a\u0085", "a C1 control"),
                     ("w\n", "a trailing newline")):
    bad(f"worker_name {label}", C, s.put(s.hello(), "body.worker_name", value), "body.worker_name")
bad("client without version", C, s.drop(s.hello(), "body.client.version"), "body.client")
bad("client with extra field", C, s.put(s.hello(), "body.client.os", "linux"), "body.client")

# -- result classification: status x error_code x retryable --------------------------------------

for status in ("FAILED", "UNKNOWN", "CANCELLED"):
    bad(f"{status} without error_code", C, s.drop(s.finish(status), "body.error_code"), "error_code")
    bad(f"{status} with empty error_code", C, s.finish(status, error_code=""), "error_code")
    if status != "FAILED":
        bad(f"{status} retryable", C, s.finish(status, retryable=True), "retryable")
bad("SUCCEEDED with an error_code", C, s.finish(error_code="oops"), "error_code")
bad("SUCCEEDED retryable", C, s.finish(retryable=True), "retryable")
bad("error_code with upper case", C, s.finish("FAILED", error_code="Boom"), "error_code")
bad("error_code 65 chars", C, s.finish("FAILED", error_code="e" * 65), "error_code")
bad("retryable as a string", C, s.finish("FAILED", retryable="true"), "retryable")
bad("status lower-case", C, s.finish("succeeded"), "status")
bad("status CANCELED", C, s.finish("CANCELED", error_code="x"), "status")
bad("error_message 4097 chars", C, s.finish("FAILED", error_message="x" * 4097), "error_message")
row("null result", C, s.put(s.finish(), "body.result", None), "invalid", "invalid_result", "body.result")
row("null result beats a bad status", C, s.put(s.finish("NOPE"), "body.result", None), "invalid", "invalid_result")
row("null result beats an alias", C, s.rename(s.put(s.finish(), "body.result", None), "body.task_id", "taskId"),
    "invalid", "invalid_result")

# -- result size and numbers (the schema cannot count bytes or see number text) ----------------

_RESULT_AT = '"result":{"sent":true,"amount":12.5}'


def with_result(result_json: str, frame: dict | None = None) -> str:
    text = s.dumps(frame or s.finish())
    assert _RESULT_AT in text
    return text.replace(_RESULT_AT, f'"result":{result_json}')


row("result exactly 262144 bytes", C, with_result('"' + "r" * 262142 + '"'), "valid", None)
runtime("result 262145 bytes", C, with_result('"' + "r" * 262143 + '"'), "result_too_large", "body.result")
row("result of 2-byte chars within the limit", C, with_result('"' + "\u00e9" * 131070 + '"'), "valid", None)
runtime("result of 2-byte chars over the limit (under 256 Ki chars)", C,
        with_result('"' + "\u00e9" * 131072 + '"'), "result_too_large", "bytes")
runtime("result too large beats a bad status", C, with_result('"' + "r" * 262143 + '"', s.finish("NOPE")),
        "result_too_large", schema="invalid")
runtime("result number exponent 309", C, with_result("[1e309]"), "invalid_result", "exponent")
runtime("result number exponent -400", C, with_result("[1E-400]"), "invalid_result", "exponent")
runtime("result number exponent 0000000000309", C, with_result("[1e0000000000309]"), "invalid_result")
row("result number exponent 308", C, with_result("[1e308,-2.5E-308,1e000000308]"), "valid", None)
runtime("result integer of 4301 digits", C, with_result("[" + "9" * 4301 + "]"), "invalid_result", "digits",
        schema="unparsed")
row("result integer of 4300 digits", C, with_result("[" + "9" * 4300 + "]"), "valid", None)
runtime("payload number exponent 400", S, s.dumps(s.assign()).replace('"total":1.1', '"total":1e400'),
        "invalid_result", "body.task.payload")
runtime("payload number beats a bad lease", S,
        s.dumps(s.drop(s.assign(), "body.lease.epoch")).replace('"total":1.1', '"total":1e400'),
        "invalid_result", schema="invalid")
row("huge exponent in a control field is invalid_frame", C,
    s.dumps(s.capacity()).replace('"capacity":8', '"capacity":1e400'), "invalid", "invalid_frame", "body.capacity")

# -- strict JSON: only the scanner can see these ----------------------------------------------------

runtime("duplicate top-level key", C, s.dumps(s.start()).replace('"id":"st1"', '"id":"st1","id":"st2"'),
        "invalid_json", "duplicate key 'id'")
runtime("duplicate key in an array item", C,
        s.dumps(s.hello()).replace('{"queue":"mail"}', '{"queue":"mail","queue":"mail"}'), "invalid_json",
        "duplicate key")
runtime("duplicate key inside result", C, with_result('{"a":1,"b":{"c":1,"c":2}}'), "invalid_json", "duplicate")
runtime("duplicate key inside payload", S, s.dumps(s.assign()).replace('"invoice":991', '"invoice":991,"invoice":9'),
        "invalid_json", "duplicate")
runtime("lone high surrogate", C, s.dumps(s.hello()).replace("billing-7", "billing\\ud800"), "invalid_json",
        "surrogate")
runtime("lone low surrogate", C, s.dumps(s.hello()).replace("billing-7", "\\udc00billing"), "invalid_json",
        "surrogate")
runtime("reversed surrogate pair", C, with_result('"\\ude00\\ud83d"'), "invalid_json", "surrogate")
runtime("lone surrogate in a result key", C, with_result('{"\\uDBFF":1}'), "invalid_json", "surrogate")
row("escaped backslash before u (not a surrogate)", C, with_result('"\\\\ud800"'), "valid", None)
_DEPTH_OK = "[" * 30 + "]" * 30  # frame 1 + body 2 + 30 = 32
runtime("depth 33 inside result", C, with_result("[" + _DEPTH_OK + "]"), "invalid_json", "nesting")
row("depth 32 inside result", C, with_result(_DEPTH_OK), "valid", None)
runtime("depth 33 with objects", C, with_result('{"a":' * 31 + "1" + "}" * 31), "invalid_json", "nesting")
runtime("nesting 100000 deep", C, with_result("[" * 100000 + "]" * 100000), "invalid_json", "nesting",
        schema="unparsed")
for token in ("NaN", "Infinity", "-Infinity"):
    runtime(f"{token} in result", C, with_result(f"[{token}]"), "invalid_json", token)
for text, label in ((s.dumps(s.start()) + "x", "trailing garbage"), (s.dumps(s.start()) + "{}", "two objects"),
                    (s.dumps(s.start())[:-1] + ",}", "trailing comma"), (with_result("[01]"), "leading zero"),
                    (with_result("[.5]"), "bare fraction"), (with_result('"a\tb"'), "raw tab in a string"),
                    ("\ufeff" + s.dumps(s.start()), "byte order mark"), ("", "empty text"),
                    (with_result("['a']"), "single quotes"), (with_result("[\u0661]"), "arabic-indic digit")):
    runtime(f"not strict JSON: {label}", C, text, "invalid_json", schema="unparsed")
row("whitespace around tokens is fine", C, " \n" + s.dumps(s.start()).replace(",", " ,\t") + "\r\n", "valid", None)

# -- times -----------------------------------------------------------------------------------------

for value, label in (("2026-02-30T00:00:00Z", "February 30"), ("2023-02-29T00:00:00Z", "not a leap year"),
                     ("2026-12-02T12:00:00.1234567Z", "7 fractional digits"), ("2026-12-02T12:00:00+00:00", "offset"),
                     ("2026-12-02t12:00:00z", "lower-case t and z"), ("2026-12-02T12:00:60Z", "leap second"),
                     ("2026-12-02 12:00:00Z", "space"), ("2026-12-02T12:00:00.Z", "empty fraction"),
                     ("0000-01-01T00:00:00Z", "year 0"), ("2026-12-02T24:00:00Z", "hour 24"),
                     ("2026-12-02T12:00:00Z\n", "trailing newline"), ("2026-13-01T00:00:00Z", "month 13"),
                     ("2026-12-02", "a date only"), ("20261202T120000Z", "basic format")):
    bad(f"server_time {label}", S, s.put(s.welcome(), "body.server_time", value), "body.server_time")
bad("expires_at February 30", S, s.put(s.ack_renew(), "body.lease.expires_at", "2026-02-30T00:00:00Z"),
    "body.lease.expires_at")
bad("grace_expires_at with offset", S, s.put(s.cancel(), "body.grace_expires_at", "2026-12-02T12:00:00+01:00"),
    "grace_expires_at")

# -- server frames: welcome, ack shapes, assign, cancel, error ---------------------------------------

bad("welcome capacity 10001", S, s.put(s.welcome(), "body.capacity", 10001), "body.capacity")
bad("welcome lease_ttl_ms 0", S, s.put(s.welcome(), "body.lease_ttl_ms", 0), "lease_ttl_ms")
bad("welcome sequence 0", S, s.put(s.welcome(), "body.sequence", "0"), "body.sequence")
bad("welcome limits with extra field", S, s.put(s.welcome(), "body.limits.max_depth", 32), "body.limits")
bad("capacity ack showing instance_secret", S, s.put(s.ack_capacity(), "body.instance_secret", s.SECRET_C),
    "instance_secret")
bad("resume ack showing lease_secret", S, s.put(s.ack_resume(), "body.lease_secret", s.SECRET_B), "lease_secret")
bad("commandResult lease showing lease_secret", S, s.put(s.ack_renew(), "body.lease.lease_secret", s.SECRET_B),
    "lease_secret")
bad("ack body mixing welcome and receipt", S, s.put(s.ack_capacity(), "body.receipt", s.receipt()), "body")
bad("ack body empty", S, s.put(s.ack_renew(), "body", {}), "body")
bad("receipt command task.cancel", S, s.put(s.ack_renew(), "body.receipt.command", "task.cancel"), "command")
bad("lease state FINISHED", S, s.put(s.ack_renew(), "body.lease.state", "FINISHED"), "state")
bad("receipt duplicate as a string", S, s.put(s.ack_finish(), "body.receipt.duplicate", "true"), "duplicate")
for value in (0, 10, -1):
    bad(f"assign priority {value}", S, s.put(s.assign(), "body.task.priority", value), "body.task.priority")
bad("concurrency_key without token", S, s.drop(s.assign(), "body.task.concurrency_token"), "concurrency")
bad("concurrency_token without key", S, s.drop(s.assign(), "body.task.concurrency_key"), "concurrency")
bad("concurrency_key with a space", S, s.put(s.assign(), "body.task.concurrency_key", "customer 42"),
    "concurrency_key")
bad("concurrency_key 129 chars", S, s.put(s.assign(), "body.task.concurrency_key", "k" * 129), "concurrency_key")
bad("effect_uncertain false", S, s.put(s.assign(), "body.task.effect_uncertain", False), "effect_uncertain")
bad("retry_of not a task id", S, s.put(s.assign(), "body.task.retry_of", s.LEASE), "retry_of")
runtime("retry_of the task itself", S, s.put(s.assign(), "body.task.retry_of", s.TASK), "invalid_frame",
        "body.task.retry_of")
runtime("lease for another task", S, s.put(s.assign(), "body.lease.task_id", s.OTHER_TASK), "invalid_frame",
        "body.lease.task_id")
bad("assigned lease RUNNING", S, s.put(s.assign(), "body.lease.state", "RUNNING"), "body.lease.state")
bad("attempt 0", S, s.put(s.assign(), "body.task.attempt", 0), "attempt")
bad("attempt as a string", S, s.put(s.assign(), "body.task.attempt", "1"), "attempt")
bad("idempotency_key empty", S, s.put(s.assign(), "body.task.idempotency_key", ""), "idempotency_key")
bad("cancel reason 1025 chars", S, s.put(s.cancel(), "body.reason", "r" * 1025), "reason")
bad("cancel without lease_id", S, s.drop(s.cancel(), "body.lease_id"), "lease_id")
bad("error code with a space", S, s.put(s.error(), "error.code", "bad code"), "error.code")
bad("error retry_after_ms -1", S, s.put(s.error(), "error.retry_after_ms", -1), "retry_after_ms")
bad("error null", S, s.put(s.error(), "error", None), "error")
bad("error reply_to empty", S, s.put(s.error(), "reply_to", ""), "reply_to")

# -- the frame-size gate (before any parsing) ---------------------------------------------------------

runtime("frame over 512 KiB", C, with_result('"' + "r" * 524288 + '"'), "invalid_frame", "limit is 524288")


def _decode(direction: str, text: str):
    return decode_client_frame(text) if direction == C else decode_server_frame(text)


@pytest.mark.parametrize("case", ROWS, ids=[r.name for r in ROWS])
def test_schema_and_decoder_agree_with_the_table(case: Row) -> None:
    assert s.schema_verdict(case.text, s.direction_def(case.direction)) == case.schema
    try:
        _decode(case.direction, case.text)
    except ProtocolError as exc:
        assert exc.code == case.code, exc.message
        if case.where is not None:
            assert case.where in exc.message
        if case.name == "frame over 512 KiB":
            assert isinstance(exc, FrameTooLarge) and exc.close_code == 1009
    else:
        assert case.code is None, f"decoder accepted; expected {case.code}"


def test_table_is_honest_about_what_the_schema_cannot_check() -> None:
    names = [r.name for r in ROWS]
    assert len(names) == len(set(names)), "row names must be unique"
    for r in ROWS:
        # The decoder never accepts what the schema rejects.
        assert not (r.schema == "invalid" and r.code is None), r.name
        blind = r.schema == "unparsed" or (r.schema == "valid" and r.code is not None)
        if blind:
            assert r.note == RUNTIME_ONLY, f"{r.name}: only the runtime can tell; mark it"
        elif r.note == RUNTIME_ONLY:
            # Schema-invalid rows marked runtime-only show a runtime code winning.
            assert r.code not in (None, "invalid_frame"), r.name


# -- lease bodies judged by the definition their frame names (docs/protocol.md §4.8, §4.4) -------------
#
# The table above validates whole frames. A conformance suite may also take
# the body of an ack and check it against the ``$defs`` entry its request
# names (worker.resume → lease, task.start/renew/finish → commandResult), or
# the lease of an assignment against ``assignedLease``; the SDK decodes the
# same frame with that request as ``ack_for``. Both must agree, and a lease
# secret may only ever appear in the assignment.


@dataclass(frozen=True)
class BodyRow:
    name: str
    frame: dict
    definition: str  # the $defs entry for the body (or for the lease inside it)
    part: str  # "body" or "body.lease"
    ack_for: str | None  # None: a task.assign
    valid: bool


BODY_ROWS = [
    BodyRow("resume ack", s.ack_resume(), "lease", "body", "worker.resume", True),
    BodyRow("resume ack showing lease_secret", s.put(s.ack_resume(), "body.lease_secret", s.SECRET_B), "lease", "body",
            "worker.resume", False),
    BodyRow("renew ack", s.ack_renew(), "commandResult", "body", "task.renew", True),
    BodyRow("finish ack without a lease", s.ack_finish(), "commandResult", "body", "task.finish", True),
    *(BodyRow(f"{command} ack whose lease shows lease_secret",
              s.put(s.put(s.ack_renew(), "body.receipt.command", command), "body.lease.lease_secret", s.SECRET_B),
              "commandResult", "body", command, False)
      for command in ("task.start", "task.renew", "task.finish")),
    BodyRow("assigned lease", s.assign(), "assignedLease", "body.lease", None, True),
    BodyRow("assigned lease without lease_secret", s.drop(s.assign(), "body.lease.lease_secret"), "assignedLease",
            "body.lease", None, False),
    BodyRow("assigned lease RUNNING", s.put(s.assign(), "body.lease.state", "RUNNING"), "assignedLease",
            "body.lease", None, False),
]


def _part(frame: dict, part: str) -> dict:
    node = frame
    for step in part.split("."):
        node = node[step]
    return node


@pytest.mark.parametrize("case", BODY_ROWS, ids=[r.name for r in BODY_ROWS])
def test_body_definitions_and_decoder_agree_on_lease_secrets(case: BodyRow) -> None:
    body = _part(case.frame, case.part)
    assert s.validator(case.definition).is_valid(body) is case.valid
    assert s.validator("serverFrame").is_valid(case.frame) is case.valid
    text = s.dumps(case.frame)
    try:
        decode_server_frame(text, ack_for=case.ack_for)
    except ProtocolError as exc:
        assert not case.valid, exc.message
        assert exc.code == "invalid_frame"
        assert "lease_secret" in exc.message or "state" in exc.message, exc.message
    else:
        assert case.valid, "the decoder accepted what the schema refuses"


@pytest.mark.parametrize("case", [r for r in BODY_ROWS if r.ack_for is not None and not r.valid],
                         ids=[r.name for r in BODY_ROWS if r.ack_for is not None and not r.valid])
def test_a_lenient_sdk_never_surfaces_a_lease_secret_outside_the_assignment(case: BodyRow) -> None:
    """``strict=False`` ignores unknown fields; a secret outside task.assign still never reaches the caller."""
    try:
        message = decode_server_frame(s.dumps(case.frame), ack_for=case.ack_for, strict=False)
    except ProtocolError as exc:
        assert exc.code == "invalid_frame"
        return
    lease = message.body if case.definition == "lease" else message.body.lease
    assert lease is not None and lease.lease_secret is None


def test_the_assignment_lease_is_not_a_lease_and_held_lease_is_lease() -> None:
    offered = s.assign()["body"]["lease"]
    assert s.validator("assignedLease").is_valid(offered)
    assert not s.validator("lease").is_valid(offered)  # it shows the secret
    assert not s.validator("heldLease").is_valid(offered)
    held = s.ack_resume()["body"]
    assert s.validator("lease").is_valid(held) and s.validator("heldLease").is_valid(held)
    assert not s.validator("assignedLease").is_valid(held)
