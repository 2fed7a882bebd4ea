"""Health, readiness, metrics and the OpenAPI document, against the running service."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import trio
import trio_websocket
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from pulse_trio.config import Settings
from pulse_trio.dburl import create_database, drop_database
from pulse_trio.http.app import build_app
from pulse_trio.http.ops import READY_TIMEOUT_S
from pulse_trio.serve import serve
from pulse_trio.store.schema.migrate import code_version

from http_support import Http, RawWorker  # noqa: I001  (beside this file; see conftest)
from metrics_support import exposition_samples
from test_stop_on_a_frozen_database import FreezingRelay

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
DOC_ID = "https://pulse-trio.dev/openapi.json"


# -- the OpenAPI document -------------------------------------------------------------------------

async def test_the_committed_document_is_the_one_served(http):
    served = await http.get("/openapi.json")
    assert served.status == 200
    assert served.body.decode("utf-8") == COMMITTED.read_text("utf-8"), (
        "docs/openapi.json is stale: python -m pulse_trio.http.openapi > docs/openapi.json")


async def test_every_route_is_documented_and_nothing_else(service):
    app = build_app(service.instance, service.store, service.settings)
    # A path converter ({key:path}: a fairness key may hold a slash) is the same parameter to OpenAPI.
    served = {(re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path), method.lower())
              for route in app.routes for method in route.methods if method != "HEAD"}
    documented = {(path, method) for path, ops in json.loads(COMMITTED.read_text())["paths"].items() for method in ops}
    assert served == documented


def _validator(name: str) -> Draft202012Validator:
    document = json.loads(COMMITTED.read_text())
    registry = Registry().with_resource(DOC_ID, Resource.from_contents(document, default_specification=DRAFT202012))
    return Draft202012Validator({"$ref": f"{DOC_ID}#/components/schemas/{name}"}, registry=registry,
                                format_checker=Draft202012Validator.FORMAT_CHECKER)


def _check(name: str, value: object) -> None:
    errors = sorted(_validator(name).iter_errors(value), key=str)
    assert not errors, f"{name}: {errors[0]}"


async def test_answers_validate_against_the_documented_schemas(http, tokens, token_factory, open_worker):
    worker = await open_worker(token_factory("worker"), "billing")
    submitted = await http.post("/v1/tasks", token=tokens["producer"], json_body={
        "queue": "billing", "kind": "invoice.send", "payload": {"n": 1}, "idempotency_key": "n-1", "delay": 0})
    _check("Task", submitted.json())
    with trio.fail_after(10):
        await worker.run_one({"ok": True})
    shown = await http.get(f"/v1/tasks/{submitted.json()['task_id']}", token=tokens["operator"])
    assert shown.json()["attempts"] and shown.json()["outcome"]
    _check("Task", shown.json())
    cancelled = await http.post(f"/v1/tasks/{submitted.json()['task_id']}/cancel", token=tokens["operator"])
    _check("Task", cancelled.json())
    _check("TaskPage", (await http.get("/v1/tasks?limit=1", token=tokens["operator"])).json())
    _check("WorkerList", (await http.get("/v1/workers?all=true", token=tokens["operator"])).json())
    _check("NodeList", (await http.get("/v1/nodes?all=true", token=tokens["operator"])).json())
    _check("QueueDepths", (await http.get("/v1/queues", token=tokens["operator"])).json())
    _check("QueueState", (await http.post("/v1/queues/mail/pause", token=tokens["operator"])).json())
    _check("QueueDepths", (await http.get("/v1/queues", token=tokens["operator"])).json())
    _check("QueueState", (await http.post("/v1/queues/mail/resume", token=tokens["operator"])).json())
    _check("QueueState", (await http.request("PUT", "/v1/queues/mail/retention", token=tokens["operator"],
                                             json_body={"value": 3600.5})).json())
    _check("QueueDepths", (await http.get("/v1/queues", token=tokens["operator"])).json())
    _check("Error", (await http.post("/v1/queues/bad%20name/pause", token=tokens["operator"])).json())
    _check("SettingMap", (await http.get("/v1/settings", token=tokens["producer"])).json())
    _check("Setting", (await http.request("PUT", "/v1/settings/permit_quarantine", token=tokens["operator"],
                                          json_body={"value": None})).json())
    _check("SettingMap", (await http.request("PATCH", "/v1/settings", token=tokens["operator"],
                                             json_body={"node_heartbeat": 2, "node_lapse": 6.5})).json())
    ready = await http.post("/v1/tasks", token=tokens["producer"], json_body={"queue": "billing", "kind": "k"})
    with_intent = await http.post(f"/v1/tasks/{ready.json()['task_id']}/cancel", token=tokens["operator"])
    assert with_intent.json()["cancel"]["state"] == "RESOLVED"
    _check("Task", with_intent.json())
    _check("Overview", (await http.get("/v1/overview", token=tokens["operator"])).json())
    _check("Whoami", (await http.get("/v1/whoami", token=tokens["producer"])).json())
    _check("TaskPage", (await http.get("/v1/tasks?order=newest&idempotency_key=n-1",
                                       token=tokens["operator"])).json())
    _check("Health", (await http.get("/healthz")).json())
    _check("Ready", (await http.get("/readyz")).json())
    for reply in (await http.get("/v1/tasks"), await http.get("/nowhere"),
                  await http.post("/v1/tasks", token=tokens["operator"], body="{")):
        _check("Error", reply.json())


# -- health and readiness -------------------------------------------------------------------------

async def test_healthz_and_readyz(http):
    assert (await http.get("/healthz")).json() == {"status": "ok"}
    ready = await http.get("/readyz")
    assert ready.status == 200
    assert ready.json() == {"status": "ready", "schema_version": code_version(), "code_version": code_version()}


async def test_readyz_lists_a_flag_that_disagrees_with_the_cluster(start_service):
    from pulse_trio.client import Client

    first = await start_service()
    with Client(first.store.config) as client:
        client.set_settings({"cancel_grace": "5"}, updated_by="cli@elsewhere")
    fighting = await start_service(cancel_grace=2)
    ready = await Http(fighting.http_port).get("/readyz")
    assert ready.status == 200  # still ready: it runs on the cluster's value, which is now its own
    _check("Ready", ready.json())
    (conflict,) = ready.json()["settings_conflicts"]
    message = conflict.pop("message")
    assert conflict == {"name": "cancel_grace", "flag": 2, "replaced": 5, "replaced_by": "cli@elsewhere",
                        "cluster": 2, "cluster_by": f"serve:{fighting.store.node_id}"}
    assert "--cancel-grace 2 s replaced the cluster's 5 s (cli@elsewhere at " in message
    assert fighting.settings.cancel_grace == 2
    assert "settings_conflicts" not in (await Http(first.http_port).get("/readyz")).json()  # it gave no flag


async def test_readyz_stays_ready_once_a_newer_release_has_migrated_the_database(db, http, tokens):
    """A rolling deploy migrates first (operations.md §1.3): the old instances still serve, and must stay in.

    Out of a load balancer's pool they would leave no instance to answer until the new ones have started.
    """
    from pulse_trio.store.engine.writer import connect as db_connect

    newer = code_version() + 1
    conn = db_connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, NOW(6))",
                        (newer, "from_a_newer_release"))
        conn.commit()
        ready = await http.get("/readyz")
        assert ready.status == 200, ready.body
        assert ready.json() == {"status": "ready", "schema_version": newer, "code_version": code_version()}
        submitted = await http.post("/v1/tasks", token=tokens["producer"],
                                    json_body={"queue": "billing", "kind": "k"})
        assert submitted.status == 201
    finally:
        with conn.cursor() as cur:
            cur.execute("DELETE FROM schema_migrations WHERE version = %s", (newer,))
        conn.commit()
        conn.close()


@pytest.fixture
async def unmigrated(database_server, nursery):
    """A service on an empty (never migrated) database."""
    config = database_server.with_database("pulse_http_unmigrated")
    create_database(config)
    settings = Settings(worker_listen=("127.0.0.1", 0), http_listen=("127.0.0.1", 0), poll_interval=1.0)
    try:
        yield await nursery.start(lambda task_status: serve(settings, config, handle_signals=False,
                                                            task_status=task_status))
    finally:
        drop_database(config)


async def test_readyz_is_503_until_the_migrations_are_applied(unmigrated):
    http = Http(unmigrated.http_port)
    reply = await http.get("/readyz")
    assert reply.status == 503 and reply.error["code"] == "migrations_pending"
    assert f"version 0; this code needs {code_version()}" in reply.error["message"]
    assert (await http.get("/healthz")).status == 200
    unmigrated.stop()


# -- metrics --------------------------------------------------------------------------------------

async def test_metrics_after_a_full_flow(http, tokens, token_factory, open_worker):
    worker = await open_worker(token_factory("worker"), "billing")
    with trio.fail_after(10):
        await http.post("/v1/tasks", token=tokens["producer"], json_body={"queue": "billing", "kind": "k"})
        await worker.run_one({"ok": True})
    await http.post("/v1/tasks", token=tokens["producer"], json_body={"queue": "billing", "kind": "k", "delay": 600})
    await http.get("/v1/tasks/tsk_01M8VZMC9N9WQ7HZY3RZQQCE2A", token=tokens["producer"])  # a 404
    await http.get("/v1/fairness-weights/acme", token=tokens["producer"])  # a route whose key takes slashes
    reply = await http.get("/metrics")
    assert reply.status == 200 and reply.headers["content-type"].startswith("text/plain")
    samples = exposition_samples(reply.body)
    assert samples[("pulse_sessions_connected", ())] == 1
    assert samples[("pulse_session_capacity", ())] == 1
    assert samples[("pulse_assignments_total", (("queue", "billing"),))] == 1
    assert samples[("pulse_finishes_total", (("queue", "billing"), ("status", "SUCCEEDED")))] == 1
    assert samples[("pulse_commands_total", (("command", "TaskFinish"),))] == 1
    assert samples[("pulse_tasks", (("queue", "billing"), ("state", "SCHEDULED")))] == 1
    # Ended tasks are counted by the finish counters, not by a scrape that would read the whole history.
    assert not any(name == "pulse_tasks" and ("state", "SUCCEEDED") in labels for name, labels in samples)
    queues = (await http.get("/v1/queues", token=tokens["producer"])).json()["queues"]
    assert queues["billing"]["states"] == {"SCHEDULED": 1, "SUCCEEDED": 1}  # asked for: exact, ended included
    assert samples[("pulse_submit_to_assign_seconds_count", (("queue", "billing"),))] == 1
    assert samples[("pulse_store_transaction_seconds_count", ())] > 5
    assert samples[("pulse_store_commits_total", ())] >= 4
    assert samples[("pulse_errors_total", (("code", "task_not_found"), ("surface", "http")))] == 1
    assert samples[("pulse_http_requests_total", (("method", "POST"), ("route", "/v1/tasks"), ("status", "201")))] == 2
    assert samples[("pulse_database_up", ())] == 1
    # Every route label is a path of the OpenAPI document (a converter such as ``{key:path}`` is not).
    paths = json.loads((await http.get("/openapi.json")).body)["paths"]
    routes = {dict(labels)["route"] for name, labels in samples if name == "pulse_http_requests_total"}
    assert "/v1/fairness-weights/{key}" in routes and routes - {"unmatched"} <= set(paths), routes
    for name in ("pulse_frames_received_total", "pulse_frames_sent_total", "pulse_frames_received_bytes_total",
                 "pulse_frames_sent_bytes_total", "pulse_lease_expiries_total", "pulse_lease_lapses_total",
                 "pulse_store_retries_total", "pulse_nodes_declared_lost_total", "pulse_lost_node_sessions_total",
                 "pulse_node_rejoins_total"):
        assert (name, ()) in samples, name
    assert samples[("pulse_frames_received_total", ())] >= 4  # hello, capacity, start, finish


async def test_metrics_count_lapsed_offers_and_expired_leases(start_service, tokens, token_factory, nursery):
    service = await start_service(start_timeout=0.2, lease_ttl=0.5, poll_interval=0.02)
    http = Http(service.http_port)
    ws = await trio_websocket.connect_websocket_url(
        nursery, f"ws://127.0.0.1:{service.worker_port}/v1/worker", subprotocols=["pulse.worker.v1"],
        extra_headers=[(b"authorization", f"Bearer {token_factory('worker')}".encode())])
    worker = RawWorker(ws)
    await worker.register("billing", capacity=2)
    for _ in range(2):
        await http.post("/v1/tasks", token=tokens["operator"], json_body={"queue": "billing", "kind": "k"})
    with trio.fail_after(10):
        first, second = await worker.next_assignment(), await worker.next_assignment()
        lease = second["lease"]
        await worker.request("task.start", {k: lease[k] for k in ("task_id", "lease_id", "lease_secret", "revision")})
        # the first offer is never started (lapses); the second is started and never renewed (expires)
        while True:
            samples = exposition_samples((await http.get("/metrics")).body)
            if samples[("pulse_lease_lapses_total", ())] >= 1 and samples[("pulse_lease_expiries_total", ())] >= 1:
                break
            await trio.sleep(0.05)
    assert first["task"]["task_id"] != second["task"]["task_id"]


async def test_a_flood_of_scrapes_takes_no_more_than_the_http_share_of_the_store_threads(db, service):
    """/metrics takes no token: its reads must leave the workers their threads, like every other HTTP read.

    The task tables are write-locked from a connection of the test's own, so every scrape's depth read
    waits inside the database; the server's process list shows how many run at once.
    """
    from pulse_trio.store.engine.writer import connect as db_connect

    http, share = Http(service.http_port), max(1, service.store.limiter.total_tokens // 2)
    lock, watch = db_connect(db), db_connect(db)
    at_once: list[int] = []
    answers: list[int] = []

    async def scrape() -> None:
        answers.append((await http.get("/metrics")).status)

    try:
        with lock.cursor() as cur:
            cur.execute("LOCK TABLES tasks WRITE, tasks AS t WRITE, leases WRITE, leases AS l WRITE")
        async with trio.open_nursery() as nursery:
            for _ in range(3 * service.store.limiter.total_tokens):
                nursery.start_soon(scrape)
            # the depth read of a scrape (queue_depths), and only that
            at_once += await _running_at_once(watch, "%UNION ALL SELECT t.queue, l.state%")
            with lock.cursor() as cur:
                cur.execute("UNLOCK TABLES")
    finally:
        lock.close()
        watch.close()
    assert 1 <= max(at_once) <= share, (at_once, share)
    assert answers == [200] * 3 * service.store.limiter.total_tokens


@pytest.mark.live
async def test_a_scrape_answers_within_its_bound_while_the_database_hangs(db):
    """A scraper gives up on a slow scrape (Prometheus: 10 s) and then sees nothing, not even pulse_database_up 0.

    The instance reaches its database through a relay that freezes: every link stays open and nothing more
    is passed on, as a hung host looks to PyMySQL. Its store would wait for such a read for tens of seconds.
    Two scrapes while it hangs each answer within the bound, from the process alone.
    """
    async with trio.open_nursery() as outer:
        relay = await outer.start(FreezingRelay(db).serve)
        relayed = dataclasses.replace(db, host="127.0.0.1", port=relay.port, unix_socket=None, hosts=(),
                                      connect_timeout=1.0)
        settings = Settings(worker_listen=("127.0.0.1", 0), http_listen=("127.0.0.1", 0))
        async with trio.open_nursery() as instance:
            service = await instance.start(lambda task_status: serve(settings, relayed, handle_signals=False,
                                                                     task_status=task_status))
            http = Http(service.http_port)
            assert exposition_samples((await http.get("/metrics")).body)[("pulse_database_up", ())] == 1
            relay.freeze()
            replies = []

            async def scrape() -> None:
                started = trio.current_time()
                replies.append((await http.get("/metrics"), trio.current_time() - started))

            async with trio.open_nursery() as scrapes:
                for _ in range(2):
                    scrapes.start_soon(scrape)
            for reply, took in replies:
                assert took < READY_TIMEOUT_S + 1.5
                samples = exposition_samples(reply.body)
                assert reply.status == 200 and samples[("pulse_database_up", ())] == 0
                assert ("pulse_frames_received_total", ()) in samples
                assert ("pulse_sessions_connected", ()) in samples
            relay.thaw()
            with trio.fail_after(15):  # the read under way ends, and a later scrape reads the database again
                while exposition_samples((await http.get("/metrics")).body)[("pulse_database_up", ())] != 1:
                    await trio.sleep(0.1)
            service.stop()
        outer.cancel_scope.cancel()


async def _running_at_once(watch, statement_like: str) -> list[int]:
    """How many other connections run a statement ``LIKE statement_like``, read 15 times 0.1 s apart."""
    counts = []
    for _ in range(15):
        await trio.sleep(0.1)
        with watch.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE %s"
                        " AND ID <> CONNECTION_ID()", (statement_like,))
            counts.append(cur.fetchone()[0])
    return counts


async def test_a_flood_of_readiness_probes_opens_one_database_connection_at_a_time(db, service):
    """/readyz takes no token: a flood of probes must not open a connection each and use up the server's.

    The schema's version table is write-locked from a connection of the test's own, so every check
    waits inside the database; the server's process list shows how many checks are open at once. The
    probes are sent without threads (the service runs in this test's own Trio run and thread pool).
    """
    import httpx

    from pulse_trio.store.engine.writer import connect as db_connect

    lock, watch = db_connect(db), db_connect(db)
    at_once: list[int] = []
    answers: list[int] = []
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http_port}", limits=limits,
                                     timeout=30) as client:

            async def probe() -> None:
                answers.append((await client.get("/readyz")).status_code)

            with lock.cursor() as cur:
                cur.execute("LOCK TABLES schema_migrations WRITE")
            async with trio.open_nursery() as nursery:
                for _ in range(100):
                    nursery.start_soon(probe)
                # a readiness check's version read, and only that
                at_once += await _running_at_once(watch, "%MAX(version), 0) FROM schema_migrations%")
                with lock.cursor() as cur:
                    cur.execute("UNLOCK TABLES")
    finally:
        lock.close()
        watch.close()
    assert max(at_once) == 1, at_once
    assert answers == [200] * 100
