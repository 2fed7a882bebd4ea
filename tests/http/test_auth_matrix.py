"""Who may do what: every endpoint against every kind of caller."""

from __future__ import annotations

import pytest

from token_support import revoke_token  # noqa: I001

UNKNOWN_TASK = "tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A"
UNKNOWN_INSTANCE = "ins_01M8VZMC9N9WQ7HZY3RZQQCE2A"


@pytest.fixture
def callers(db, tokens, token_factory) -> dict[str, dict[str, str]]:
    """Headers per caller: anonymous, bad credentials, a revoked token, and one token per role."""
    revoked = token_factory("operator")
    revoke_token(db, revoked)
    bearer = {name: {"Authorization": f"Bearer {token}"} for name, token in tokens.items()}
    return {
        "anonymous": {},
        "unknown": {"Authorization": "Bearer pt_not-a-real-token-at-all"},
        "not_bearer": {"Authorization": f"Basic {tokens['operator']}"},
        "revoked": {"Authorization": f"Bearer {revoked}"},
        **bearer,
    }


@pytest.fixture
async def tasks(http, tokens) -> dict[str, str]:
    """One READY task in billing (the producer's queue) and one in mail (not its queue)."""
    made = {}
    for queue in ("billing", "mail"):
        reply = await http.post("/v1/tasks", token=tokens["operator"], json_body={"queue": queue, "kind": "k"})
        made[queue] = reply.json()["task_id"]
    return made


UNAUTHENTICATED = {"anonymous": 401, "unknown": 401, "not_bearer": 401, "revoked": 401}

# (method, path, body, expected status per caller); "{billing}"/"{mail}" name the fixture's tasks.
MATRIX = [
    ("POST", "/v1/tasks", {"queue": "billing", "kind": "k"},
     {"worker": 403, "producer": 201, "producer_any": 201, "operator": 201}),
    ("POST", "/v1/tasks", {"queue": "mail", "kind": "k"},
     {"worker": 403, "producer": 403, "producer_any": 201, "operator": 201}),
    ("GET", "/v1/tasks/{billing}", None, {"worker": 403, "producer": 200, "producer_any": 200, "operator": 200}),
    ("GET", "/v1/tasks/{mail}", None, {"worker": 403, "producer": 404, "producer_any": 200, "operator": 200}),
    ("GET", "/v1/tasks", None, {"worker": 403, "producer": 200, "producer_any": 200, "operator": 200}),
    ("GET", "/v1/tasks?queue=mail", None, {"worker": 403, "producer": 403, "producer_any": 200, "operator": 200}),
    ("POST", "/v1/tasks/{billing}/cancel", None,
     {"worker": 403, "producer": 403, "producer_any": 403, "operator": 200}),
    ("POST", "/v1/tasks/{billing}/retry", None,
     {"worker": 403, "producer": 403, "producer_any": 403, "operator": 409}),
    ("GET", "/v1/workers", None, {"worker": 403, "producer": 403, "producer_any": 403, "operator": 200}),
    ("POST", f"/v1/workers/{UNKNOWN_INSTANCE}/drain", None,
     {"worker": 403, "producer": 403, "producer_any": 403, "operator": 404}),
    ("GET", "/v1/queues", None, {"worker": 403, "producer": 200, "producer_any": 200, "operator": 200}),
    ("POST", "/v1/queues/billing/pause", None,
     {"worker": 403, "producer": 403, "producer_any": 403, "operator": 200}),
    ("POST", "/v1/queues/billing/resume", None,
     {"worker": 403, "producer": 403, "producer_any": 403, "operator": 200}),
    ("PUT", "/v1/queues/billing/retention", {"value": 86400},
     {"worker": 403, "producer": 403, "producer_any": 403, "operator": 200}),
    ("GET", "/v1/nodes", None, {"worker": 403, "producer": 403, "producer_any": 403, "operator": 200}),
    ("GET", "/v1/settings", None, {"worker": 403, "producer": 200, "producer_any": 200, "operator": 200}),
    ("GET", "/v1/settings/cancel_grace", None,
     {"worker": 403, "producer": 200, "producer_any": 200, "operator": 200}),
    ("PUT", "/v1/settings/cancel_grace", {"value": 30},
     {"worker": 403, "producer": 403, "producer_any": 403, "operator": 200}),
    ("PATCH", "/v1/settings", {"cancel_grace": 30},
     {"worker": 403, "producer": 403, "producer_any": 403, "operator": 200}),
    ("GET", "/v1/whoami", None, {"worker": 403, "producer": 200, "producer_any": 200, "operator": 200}),
    ("GET", "/v1/overview", None, {"worker": 403, "producer": 200, "producer_any": 200, "operator": 200}),
]


@pytest.mark.parametrize(("method", "path", "body", "expected"), MATRIX,
                         ids=[f"{m} {p}" + (f" {b['queue']}" if b and "queue" in b else "") for m, p, b, _ in MATRIX])
async def test_auth_matrix(http, callers, tasks, method, path, body, expected):
    path = path.format(**tasks)
    for caller, want in {**UNAUTHENTICATED, **expected}.items():
        reply = await http.request(method, path, json_body=body, headers=callers[caller])
        assert reply.status == want, (caller, reply.status, reply.body)
        if want == 401:
            assert reply.error["code"] == "unauthenticated"
            assert reply.headers["www-authenticate"].startswith("Bearer")
        elif want == 403:
            assert reply.error["code"] == "forbidden"
        elif want == 404:
            assert reply.error["code"] in ("task_not_found", "instance_not_found")


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/openapi.json", "/ui/", "/ui/app.js"])
async def test_operational_endpoints_need_no_token(http, path):
    assert (await http.get(path)).status == 200


async def test_a_foreign_task_is_indistinguishable_from_a_missing_one(http, tokens, tasks):
    foreign = await http.get(f"/v1/tasks/{tasks['mail']}", token=tokens["producer"])
    missing = await http.get(f"/v1/tasks/{UNKNOWN_TASK}", token=tokens["producer"])
    assert foreign.status == missing.status == 404
    assert foreign.error["message"].replace(tasks["mail"], "X") == missing.error["message"].replace(UNKNOWN_TASK, "X")


async def test_a_queue_scoped_operator_is_held_to_its_queues(http, token_factory, tasks):
    scoped = token_factory("operator", ("billing",))
    assert (await http.post(f"/v1/tasks/{tasks['mail']}/cancel", token=scoped)).status == 404
    assert (await http.post(f"/v1/tasks/{tasks['billing']}/cancel", token=scoped)).status == 200
    assert (await http.post("/v1/tasks", token=scoped, json_body={"queue": "mail", "kind": "k"})).status == 403


def _whoami_with(port: int, *authorizations: str) -> bytes:
    """``GET /v1/whoami`` with each of ``authorizations`` as an Authorization header of its own."""
    import socket

    head = "".join(f"Authorization: {value}\r\n" for value in authorizations)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET /v1/whoami HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{head}\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        return data


async def test_an_authorization_header_given_twice_is_refused_whichever_comes_first(http, tokens):
    """Not read as its first value: the worker endpoint refuses it too, and a proxy may have judged the other."""
    import trio

    valid, other = f"Bearer {tokens['operator']}", "Bearer pt_not-a-real-token-at-all"
    assert (await trio.to_thread.run_sync(_whoami_with, http.port, valid)).startswith(b"HTTP/1.1 200")
    for pair in ((valid, other), (other, valid), (valid, valid)):
        answer = await trio.to_thread.run_sync(_whoami_with, http.port, *pair)
        assert answer.startswith(b"HTTP/1.1 401") and b'"unauthenticated"' in answer, answer
        assert b"www-authenticate: Bearer" in answer.lower().replace(b"bearer", b"Bearer"), answer
        assert b"twice" in answer and tokens["operator"].encode() not in answer, answer
