"""Every error status, each with the exact ``{"error": {"code", "message"}}`` shape."""

from __future__ import annotations

import dataclasses
import json
import socket

import pytest
import trio

from pulse_trio.config import Settings
from pulse_trio.http.bodies import MAX_BODY_BYTES
from pulse_trio.serve import serve

from http_support import Http  # noqa: I001  (beside this file; see conftest)

OK = {"queue": "billing", "kind": "k"}
JSON_HEADERS = {"Content-Type": "application/json"}


@pytest.mark.parametrize(("body", "code", "fragment"), [
    ('{"queue":"billing","kind":"k",}', "invalid_json", "strict JSON"),
    ('{"queue":"billing","queue":"mail","kind":"k"}', "invalid_json", "duplicate key"),
    ('{"queue":"billing","kind":"k","payload":NaN}', "invalid_json", "NaN"),
    ('{"queue":"billing","kind":"k","payload":"\\ud800"}', "invalid_json", "surrogate"),
    ("[" * 40 + "]" * 40, "invalid_json", "deeper"),
    ('["queue"]', "invalid_request", "JSON object"),
    ("", "invalid_json", "strict JSON"),
    ('{"kind":"k"}', "invalid_request", "missing required field(s): queue"),
    ('{"queue":"billing","kind":"k","colour":"red"}', "invalid_request", "unknown field(s): colour"),
    ('{"queue":"Billing!","kind":"k"}', "invalid_request", "queue"),
    ('{"queue":"billing","kind":"k","priority":1.5}', "invalid_request", "priority must be a JSON integer"),
    ('{"queue":"billing","kind":"k","priority":true}', "invalid_request", "priority must be a JSON integer"),
    ('{"queue":"billing","kind":"k","priority":10}', "invalid_request", "priority must be 0..9"),
    ('{"queue":"billing","kind":"k","max_attempts":0}', "invalid_request", "max_attempts"),
    ('{"queue":"billing","kind":"k","delay":"soon"}', "invalid_request", "delay must be a number"),
    ('{"queue":"billing","kind":"k","delay":-1}', "invalid_request", "delay must not be negative"),
    ('{"queue":"billing","kind":"k","delay":1,"due_at":"2099-01-01T00:00:00Z"}', "invalid_request", "not both"),
    ('{"queue":"billing","kind":"k","due_at":"2026-02-30T00:00:00Z"}', "invalid_request", "due_at"),
    ('{"queue":"billing","kind":"k","retry_uncertain":"yes"}', "invalid_request", "true or false"),
    ('{"queue":"billing","kind":"k","lease_ttl":0}', "invalid_request", "lease_ttl"),
    ('{"queue":"billing","kind":"k","concurrency_key":"has space"}', "invalid_request", "concurrency_key"),
    ('{"queue":"billing","kind":"k","backoff_factor":0.5}', "invalid_request", "backoff"),
    ('{"queue":"billing","kind":"k","backoff_factor":"fast"}', "invalid_request", "backoff_factor must be a number"),
    ('{"queue":"billing","kind":"k","backoff_initial":10,"backoff_max":5}', "invalid_request", "initial <= max"),
    ('{"queue":"billing","kind":"k","backoff_initial":0}', "invalid_request", "backoff"),
    ('{"queue":"billing","kind":"k","backoff_max":1e9}', "invalid_request", "backoff"),
    ('{"queue":"billing","kind":"k","payload":1e999}', "invalid_request", "exponent"),
])
async def test_400_bad_submit_bodies_write_nothing(http, tokens, body, code, fragment):
    reply = await http.post("/v1/tasks", token=tokens["operator"], body=body, headers=JSON_HEADERS)
    assert reply.status == 400, reply.body
    assert reply.error["code"] == code and fragment in reply.error["message"], reply.error
    listed = await http.get("/v1/tasks", token=tokens["operator"])
    assert listed.json()["tasks"] == []


async def test_400_a_body_that_is_not_utf8(http, tokens):
    reply = await http.post("/v1/tasks", token=tokens["operator"], body=b'{"queue":"\xff"}', headers=JSON_HEADERS)
    assert reply.status == 400 and reply.error["code"] == "invalid_json"


@pytest.mark.parametrize(("query", "fragment"), [
    ("?state=DONE", "state must be one of"),
    ("?limit=0", "limit must be an integer 1..1000"),
    ("?limit=ten", "limit must be an integer"),
    ("?cursor=42", "cursor"),
    ("?queue=billing&queue=mail", "given twice"),
    ("?colour=red", "unknown query parameter"),
])
async def test_400_bad_list_parameters(http, tokens, query, fragment):
    reply = await http.get(f"/v1/tasks{query}", token=tokens["operator"])
    assert reply.status == 400 and reply.error["code"] == "invalid_request"
    assert fragment in reply.error["message"]


async def test_400_bad_cancel_and_retry_bodies(http, tokens):
    task_id = (await http.post("/v1/tasks", token=tokens["operator"], json_body=OK)).json()["task_id"]
    extra = await http.post(f"/v1/tasks/{task_id}/cancel", token=tokens["operator"], json_body={"why": "x"})
    assert extra.status == 400 and "unknown field(s): why" in extra.error["message"]
    long = await http.post(f"/v1/tasks/{task_id}/cancel", token=tokens["operator"], json_body={"reason": "x" * 1025})
    assert long.status == 400 and "reason" in long.error["message"]
    retry = await http.post(f"/v1/tasks/{task_id}/retry", token=tokens["operator"], json_body={"now": True})
    assert retry.status == 400


async def test_401_without_a_token(http):
    reply = await http.post("/v1/tasks", json_body=OK)
    assert reply.status == 401 and reply.error["code"] == "unauthenticated"
    assert reply.headers["www-authenticate"] == 'Bearer realm="pulse"'


async def test_403_foreign_queue(http, tokens):
    reply = await http.post("/v1/tasks", token=tokens["producer"], json_body={"queue": "mail", "kind": "k"})
    assert reply.status == 403 and reply.error["code"] == "forbidden" and "'mail'" in reply.error["message"]


@pytest.mark.parametrize("path", ["/v1/tasks/tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A", "/v1/tasks/not-an-id",
                                  "/v1/tasks/tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A/cancel"])
async def test_404_unknown_task(http, tokens, path):
    method = "POST" if path.endswith("cancel") else "GET"
    reply = await http.request(method, path, token=tokens["operator"])
    assert reply.status == 404 and reply.error["code"] == "task_not_found"


async def test_404_unknown_route_and_405_wrong_method(http, tokens):
    missing = await http.get("/v2/everything", token=tokens["operator"])
    assert missing.status == 404 and missing.error["code"] == "not_found"
    wrong = await http.request("DELETE", "/v1/tasks", token=tokens["operator"])
    assert wrong.status == 405 and wrong.error["code"] == "method_not_allowed"
    assert set(wrong.headers["allow"].split(", ")) == {"GET", "HEAD", "POST"}


async def test_409_retrying_a_task_that_is_not_terminal(http, tokens):
    task_id = (await http.post("/v1/tasks", token=tokens["operator"], json_body=OK)).json()["task_id"]
    reply = await http.post(f"/v1/tasks/{task_id}/retry", token=tokens["operator"])
    assert reply.status == 409 and reply.error["code"] == "not_retryable" and "READY" in reply.error["message"]


async def test_413_a_body_over_the_frame_limit_is_refused_before_parsing(http, tokens):
    body = json.dumps({**OK, "payload": "x" * MAX_BODY_BYTES})
    reply = await http.post("/v1/tasks", token=tokens["operator"], body=body, headers=JSON_HEADERS)
    assert reply.status == 413 and reply.error["code"] == "request_too_large"


async def test_413_a_body_without_content_length_is_cut_off_while_reading(http, tokens):
    def chunked() -> bytes:
        payload = b'{"queue":"billing","kind":"k","payload":"' + b"x" * (MAX_BODY_BYTES + 10) + b'"}'
        return b"".join(b"%x\r\n%s\r\n" % (len(payload[i:i + 65536]), payload[i:i + 65536])
                        for i in range(0, len(payload), 65536)) + b"0\r\n\r\n"

    def send() -> bytes:
        with socket.create_connection(("127.0.0.1", http.port), timeout=10) as s:
            s.sendall(b"POST /v1/tasks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                      b"Authorization: Bearer " + tokens["operator"].encode() + b"\r\n\r\n")
            try:
                s.sendall(chunked())
            except OSError:
                pass  # the server may answer and close before reading it all
            answer = b""
            while b"}}" not in answer:  # headers and body may come in separate segments
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:  # unread upload bytes make the close a reset
                    break
                if not chunk:
                    break
                answer += chunk
            return answer

    answer = await trio.to_thread.run_sync(send)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"request_too_large"' in answer


async def test_413_a_payload_over_256_kib(http, tokens):
    reply = await http.post("/v1/tasks", token=tokens["operator"], json_body={**OK, "payload": "x" * 262_144})
    assert reply.status == 413 and reply.error["code"] == "payload_too_large"


async def test_415_a_body_declared_as_something_else(http, tokens):
    reply = await http.post("/v1/tasks", token=tokens["operator"], body=json.dumps(OK),
                            headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert reply.status == 415 and reply.error["code"] == "unsupported_media_type"


async def test_415_a_json_body_declared_in_another_charset_is_not_read_as_utf8(http, tokens):
    """``Ã©`` in Latin-1 is the two bytes UTF-8 spells ``é``: read as UTF-8, the task would hold a string
    its producer never sent. A charset other than UTF-8 is refused; UTF-8, named in any case, is read."""
    latin1 = json.dumps({**OK, "payload": "Ã©"}, ensure_ascii=False).encode("latin-1")
    reply = await http.post("/v1/tasks", token=tokens["operator"], body=latin1,
                            headers={"Content-Type": "application/json; charset=ISO-8859-1"})
    assert reply.status == 415 and reply.error["code"] == "unsupported_media_type", reply.body
    assert (await http.get("/v1/tasks", token=tokens["operator"])).json()["tasks"] == []
    reply = await http.post("/v1/tasks", token=tokens["operator"], body=json.dumps(OK),
                            headers={"Content-Type": "application/json; charset=no-such-charset"})
    assert reply.status == 415 and reply.error["code"] == "unsupported_media_type", reply.body
    for declared in ("application/json; charset=utf-8", 'application/json;charset="UTF-8"',
                     "application/json; charset=utf8"):  # UTF-8 under another of its names
        reply = await http.post("/v1/tasks", token=tokens["operator"], body=json.dumps(OK),
                                headers={"Content-Type": declared})
        assert reply.status == 201, (declared, reply.body)


async def test_a_content_type_given_twice_is_refused_not_read_as_its_first(http, tokens):
    """Read as the first, a Latin-1 body also declared UTF-8 was stored as a string its producer never sent."""
    latin1 = json.dumps({**OK, "payload": "Ã©"}, ensure_ascii=False).encode("latin-1")

    def post(declared: tuple[str, ...]) -> tuple[int, bytes]:
        import http.client as httpclient
        conn = httpclient.HTTPConnection("127.0.0.1", http.port, timeout=30)
        try:
            conn.putrequest("POST", "/v1/tasks")
            conn.putheader("Authorization", f"Bearer {tokens['operator']}")
            for value in declared:
                conn.putheader("Content-Type", value)
            conn.putheader("Content-Length", str(len(latin1)))
            conn.endheaders(latin1)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    for declared in (("application/json; charset=utf-8", "application/json; charset=ISO-8859-1"),
                     ("application/json", "application/json")):
        status, body = await trio.to_thread.run_sync(post, declared)
        assert status == 400, (declared, status, body[:200])
        error = json.loads(body)["error"]
        assert error["code"] == "invalid_request", error
        assert "Content-Type header is given twice" in error["message"]
    assert (await http.get("/v1/tasks", token=tokens["operator"])).json()["tasks"] == []


@pytest.fixture
async def service_without_database(db, nursery, token_factory):
    """A service whose database is not there (a closed port): what an outage looks like."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    away = dataclasses.replace(db, host="127.0.0.1", port=closed_port, unix_socket=None, connect_timeout=1.0)
    settings = Settings(worker_listen=("127.0.0.1", 0), http_listen=("127.0.0.1", 0), poll_interval=1.0)
    return await nursery.start(lambda task_status: serve(settings, away, handle_signals=False,
                                                         task_status=task_status))


async def test_503_when_the_database_is_unavailable(service_without_database, tokens):
    http = Http(service_without_database.http_port)
    for method, path in (("POST", "/v1/tasks"), ("GET", "/v1/queues"), ("GET", "/readyz")):
        reply = await http.request(method, path, token=tokens["operator"], json_body=OK if method == "POST" else None)
        assert reply.status == 503, (path, reply.body)
        assert reply.error["code"] == "database_unavailable" and reply.headers["retry-after"] == "1"
    assert (await http.get("/healthz")).status == 200
    metrics = (await http.get("/metrics")).body.decode()
    assert "pulse_database_up 0.0" in metrics


@pytest.mark.parametrize("query", ["?queue=%C3%83", "?kind=%C3%83", "?queue=", "?kind=", "?queue=billing%00",
                                   "?queue=" + "q" * 65, "?idempotency_key=", "?state="])
async def test_400_names_outside_the_grammar_are_refused_before_any_sql(http, tokens, query):
    """A name the schema forbids is bad input (400), never a database outage (503 with Retry-After)."""
    for token in (tokens["operator"], tokens["producer"]):
        reply = await http.get(f"/v1/tasks{query}", token=token)
        assert reply.status == 400, (query, reply.status, reply.body)
        assert reply.error["code"] == "invalid_request" and "retry-after" not in reply.headers
    metrics = (await http.get("/metrics")).body.decode()
    assert 'code="database_unavailable"' not in metrics


@pytest.mark.parametrize("query", ["?idempotency_key=%FF", "?idempotency_key=caf%E9", "?idempotency_key=%ED%A0%80",
                                   "?queue=billing&kind=%C0%AF", "?%FF=1", "?state=READY%FF"])
async def test_400_a_query_string_that_is_not_utf8_once_decoded(http, tokens, query):
    """Not read with U+FFFD in its place: ``%FF`` would then find the task whose key is that character."""
    keyed = {**OK, "idempotency_key": "\ufffd"}
    submitted = await http.post("/v1/tasks", token=tokens["operator"], json_body=keyed)
    assert submitted.status in (200, 201), submitted.body
    found = await http.get("/v1/tasks?idempotency_key=%EF%BF%BD", token=tokens["operator"])
    assert [t["task_id"] for t in found.json()["tasks"]] == [submitted.json()["task_id"]]
    reply = await http.get(f"/v1/tasks{query}", token=tokens["operator"])
    assert (reply.status, reply.error["code"]) == (400, "invalid_request"), (query, reply.status, reply.body)
    assert "UTF-8" in reply.error["message"], reply.error


async def test_400_a_submit_to_a_queue_outside_the_grammar_even_with_a_scoped_token(http, tokens):
    for body in ({"queue": "Ã", "kind": "k"}, {"queue": "billing", "kind": "Ã"}, {"queue": "", "kind": "k"}):
        reply = await http.post("/v1/tasks", token=tokens["producer"], json_body=body)
        assert reply.status == 400 and reply.error["code"] == "invalid_request", (body, reply.body)


def test_only_a_lost_connection_is_an_outage():
    """503 means "the database is away, retry"; any other database error is a defect or bad input."""
    import pymysql

    from pulse_trio.http.errors import database_error
    from pulse_trio.store.engine.facade import StoreUnavailable

    for outage in (StoreUnavailable("gone"), pymysql.err.OperationalError(2003, "Can't connect"),
                   pymysql.err.OperationalError(2013, "Lost connection"), pymysql.err.InterfaceError(0, "")):
        failure = database_error(outage)
        assert failure is not None and failure.status == 503 and failure.headers["Retry-After"] == "1"
    for bad_input in (pymysql.err.OperationalError(1267, "Illegal mix of collations"),
                      pymysql.err.DataError(1264, "Out of range value for column 'lease_ttl_ms'"),
                      pymysql.err.DataError(1406, "Data too long"),
                      pymysql.err.OperationalError(1366, "Incorrect string value")):
        failure = database_error(bad_input)
        assert failure is not None and failure.status == 400 and failure.code == "invalid_request"
        assert "Retry-After" not in failure.headers
    for defect in (pymysql.err.ProgrammingError(1064, "syntax"), pymysql.err.OperationalError(1054, "Unknown column"),
                   pymysql.err.InternalError(1105, "unknown")):
        failure = database_error(defect)
        assert failure is not None and failure.status == 500 and failure.code == "internal"
    assert database_error(ValueError("not a database error")) is None


async def test_a_refusal_never_offers_an_empty_list_of_names(http, tokens):
    task_id = (await http.post("/v1/tasks", token=tokens["operator"], json_body=OK)).json()["task_id"]
    retry = await http.post(f"/v1/tasks/{task_id}/retry", token=tokens["operator"], json_body={"now": True})
    queues = await http.get("/v1/queues?colour=red", token=tokens["operator"])
    for reply, text in ((retry, "this takes no fields"), (queues, "this takes no query parameters")):
        assert reply.status == 400 and text in reply.error["message"], reply.error
        assert not reply.error["message"].rstrip().endswith("allowed:"), reply.error


async def test_the_cancel_reason_shown_by_get_and_task_show_is_the_one_given(http, tokens, db):
    import subprocess
    import sys

    task_id = (await http.post("/v1/tasks", token=tokens["operator"], json_body=OK)).json()["task_id"]
    too_long = await http.post(f"/v1/tasks/{task_id}/cancel", token=tokens["operator"], json_body={"reason": "r" * 256})
    assert too_long.status == 400 and "255" in too_long.error["message"]
    reason = "customer asked: " + "ü" * 239
    cancelled = await http.post(f"/v1/tasks/{task_id}/cancel", token=tokens["operator"], json_body={"reason": reason})
    assert cancelled.status == 200 and cancelled.json()["cancel"]["reason"] == reason
    shown = await http.get(f"/v1/tasks/{task_id}", token=tokens["operator"])
    assert shown.json()["cancel"]["reason"] == reason
    cli = await trio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "pulse_trio", "task", "show", task_id, "--database-url", db.url(redact=False)],
        capture_output=True, text=True, timeout=60))
    assert cli.returncode == 0 and json.loads(cli.stdout)["cancel"]["reason"] == reason


async def test_an_idempotency_key_header_outside_its_documented_pattern_is_400(http, tokens):
    inside = await http.post("/v1/tasks", token=tokens["operator"], json_body=OK, headers={"Idempotency-Key": "a\tb c"})
    assert inside.status == 201 and inside.json()["idempotency_key"] == "a\tb c", inside.body
    for value in ("caf\xe9", "x" * 256):
        reply = await http.post("/v1/tasks", token=tokens["operator"], json_body=OK, headers={"Idempotency-Key": value})
        assert reply.status == 400 and "Idempotency-Key header" in reply.error["message"], (value[:10], reply.body)


def _operations() -> list[tuple[str, str]]:
    """Every ``/v1`` operation of docs/openapi.json, its path parameters filled with well-formed ids."""
    from pathlib import Path

    document = json.loads((Path(__file__).resolve().parents[2] / "docs" / "openapi.json").read_text())
    fill = {"{task_id}": "tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A", "{instance_id}": "ins_01M8VZMC9N9WQ7HZY3RZQQCE2A",
            "{queue}": "billing", "{name}": "cancel_grace", "{schedule}": "nightly", "{key}": "tenant-1"}
    operations = []
    for path, methods in document["paths"].items():
        if path.startswith("/v1/"):
            for placeholder, value in fill.items():
                path = path.replace(placeholder, value)
            operations += [(method.upper(), path) for method in methods if method in {"get", "post", "put",
                                                                                       "patch", "delete"}]
    return operations


@pytest.mark.parametrize(("method", "path"), _operations())
async def test_every_operation_refuses_a_query_parameter_it_does_not_take(http, tokens, method, path):
    """``GET /v1/tasks/{id}?wait=30`` (the long-poll's parameter on the wrong path) must not answer as if asked."""
    reply = await http.request(method, f"{path}?surely_unknown=1", token=tokens["operator"])
    assert (reply.status, reply.error["code"]) == (400, "invalid_request"), (method, path, reply.body[:120])
    assert "surely_unknown" in reply.error["message"]


async def test_only_a_submit_takes_an_idempotency_key_header(http, tokens):
    """Elsewhere it was ignored: a schedule created again under the same key was 409, not the replay it asked for."""
    operator, key = tokens["operator"], {"Idempotency-Key": "create-nightly-1"}
    schedule = {"name": "nightly", "queue": "billing", "kind": "k", "interval": 60}
    first = await http.post("/v1/schedules", token=operator, json_body=schedule, headers=key)
    assert (first.status, first.error["code"]) == (400, "invalid_request"), first.body
    assert "Idempotency-Key" in first.error["message"]
    assert (await http.get("/v1/schedules", token=operator)).json()["schedules"] == []
    for method, path in _operations():
        if (method, path) == ("POST", "/v1/tasks"):
            continue
        reply = await http.request(method, path, token=operator, headers=key)
        assert (reply.status, reply.error["code"]) == (400, "invalid_request"), (method, path, reply.body[:120])
        assert "Idempotency-Key" in reply.error["message"], (method, path, reply.error)
    submitted = await http.post("/v1/tasks", token=operator, json_body=OK, headers=key)
    assert submitted.status == 201 and submitted.json()["idempotency_key"] == "create-nightly-1"


@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/tasks/"), ("POST", "/v1/tasks/"),
                                              ("GET", "/v1/tasks/tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A/outcome/")])
async def test_a_trailing_slash_is_an_unknown_path_not_a_redirect(http, tokens, method, path):
    """A redirect would have an empty body, and its Location would be built from the request's Host header."""
    reply = await http.request(method, path, token=tokens["producer"], headers={"Host": "evil.example"},
                               json_body={"queue": "billing", "kind": "k"} if method == "POST" else None)
    assert (reply.status, reply.error["code"]) == (404, "not_found"), (reply.status, reply.headers)
