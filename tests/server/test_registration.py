"""Registration: the handshake (path, subprotocol, token) and worker.hello."""

from __future__ import annotations

import json

import pytest
import trio

import harness
from pulse_trio.charts import CHARTS
from pulse_trio.server.live_session import LiveSession
from pulse_trio.server.timers import RECONCILE_EVERY_S
from pulse_trio.contract import messages as m
from pulse_trio.contract.bodies import Subscription
from pulse_trio.store import NewInstance, Refusal, SubscribedQueue
from pulse_trio.store.instance import instances
from pulse_trio.store.instance.instances import QUEUES_ALLOWED, TOKEN_LIVE
from sql_support import rows

#: What a loaded test machine may add to a documented bound before the service acts on it.
LOAD_SLACK_S = 1.5


@pytest.mark.parametrize("transport", ["ws", "wss"])
async def test_good_hello_gets_a_welcome_and_epochs_increase(transport, start_service, connect, worker_token,
                                                             tls, client):
    cert, key, context = tls
    if transport == "wss":
        service = await start_service(tls_cert=cert, tls_key=key)
        kw = {"ssl_context": context}
    else:
        service = await start_service()
        kw = {}
    first = await connect(service, worker_token, name="w1", **kw)
    reply = await first.hello(["billing"], cancellation_notifications=True, concurrency_keys=False)
    assert reply["type"] == "worker.welcome" and reply["reply_to"] == "h1"
    welcome = reply["body"]
    assert welcome["limits"] == {"max_frame_bytes": 524288, "max_result_bytes": 262144}
    assert welcome["drain"] is False and welcome["capacity"] == 0
    second = await connect(service, worker_token, name="w2", **kw)
    other = (await second.hello(["billing"]))["body"]
    assert int(other["epoch"]) > int(welcome["epoch"])
    assert other["instance_id"] != welcome["instance_id"]
    assert other["instance_secret"] != welcome["instance_secret"]
    assert second.session_id != first.session_id
    # The session works end to end over this transport.
    await first.capacity_ok(1)
    task = client.submit("billing", "invoice.send", {"n": 1})
    held = await first.expect_assign()
    assert held.task_id == task["task_id"]
    await first.ok(first.start(held))
    await first.ok(first.finish(held))


async def test_wss_refuses_a_client_that_does_not_trust_the_ca(start_service, tls, worker_token):
    import ssl

    import trio

    cert, key, _ = tls
    service = await start_service(tls_cert=cert, tls_key=key)
    with pytest.raises(trio.BrokenResourceError) as raised:
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream("127.0.0.1", service.worker_port)
            tls_stream = trio.SSLStream(stream, ssl.create_default_context(), server_hostname="localhost")
            await tls_stream.do_handshake()
    assert isinstance(raised.value.__cause__, ssl.SSLCertVerificationError)


@pytest.mark.parametrize("authorization", [None, "Bearer pulse_wrong", "Bearer", "Basic dXNlcjpwYXNz", "TWICE"])
async def test_bad_token_gets_http_401_and_no_websocket(start_service, worker_token, authorization):
    service = await start_service()
    if authorization is None:
        headers = []
    elif authorization == "TWICE":  # a valid token, but two Authorization headers: ambiguous
        headers = harness.headers_for(worker_token) * 2
    else:
        headers = [(b"authorization", authorization.encode())]
    refusal = await harness.rejected(service.worker_port, None, headers=headers)
    assert refusal.status_code == 401


async def test_non_worker_and_revoked_tokens_get_401(start_service, token_factory, revoke):
    service = await start_service()
    producer = token_factory("producer", ["billing"])
    assert (await harness.rejected(service.worker_port, producer)).status_code == 401
    worker = token_factory("worker", ["billing"])
    revoke(worker)
    assert (await harness.rejected(service.worker_port, worker)).status_code == 401


async def test_a_revoke_ends_the_sessions_its_token_opened_before_and_they_are_offered_nothing(
        start_service, connect, token_factory, revoke, client):
    """docs/protocol.md §1.2: the timers re-check the sessions' tokens every RECONCILE_EVERY_S, at a tick;
    each session of a revoked token gets a fatal permission_denied and close 1008, the others go on."""
    service = await start_service()
    token, other = token_factory("worker", ["billing"]), token_factory("worker", ["billing"])
    revoked = [await connect(service, token, name=f"revoked-{n}") for n in range(2)]
    for worker in revoked:
        await worker.register(["billing"], capacity=1)
    kept = await connect(service, other, name="kept")
    await kept.register(["billing"], capacity=1)
    revoke(token)
    revoked_at = trio.current_time()
    bound = RECONCILE_EVERY_S + service.timers.interval + LOAD_SLACK_S
    for worker in revoked:
        frame = await worker.expect_error("permission_denied", fatal=True, reply_to=harness.ABSENT, timeout=bound)
        assert frame["session_id"] == worker.session_id
        await worker.expect_close(1008)  # and no frame after the error: no offer either
    assert trio.current_time() - revoked_at < bound
    task = client.submit("billing", "invoice.send", {"card": "4111-secret"})
    assert (await kept.expect_assign()).task_id == task["task_id"]
    assert not any(f["type"] == "task.assign" for worker in revoked for f in worker.received)


async def test_a_token_revoked_between_the_handshake_and_the_hello_cannot_register(
        start_service, connect, token_factory, revoke, client):
    """The registration checks the token again: a hello after a revoke is refused as that token's handshake
    would be now (fatal permission_denied, close 1008), no session is written, and nothing is offered."""
    service = await start_service()
    token = token_factory("worker", ["billing"])
    worker = await connect(service, token)
    revoke(token)
    client.submit("billing", "invoice.send", {})
    reply = await worker.hello(["billing"])
    error = worker.assert_error(reply, "permission_denied", fatal=True)
    assert "revoked" in error["message"] and "session_id" not in reply and reply["reply_to"] == "h1"
    await worker.expect_close(1008)
    assert not any(w["worker_name"] == worker.name for w in client.workers())


async def test_a_refused_hello_is_worded_from_the_guard_that_refused(start_service, connect, token_factory, revoke):
    """A foreign queue and a revoked token are both a fatal permission_denied; the message says which the store
    found, read from the guard that refused, not from the order the chart checks them in. A hello that is both
    is told of the guard statecharts/instance.json checks first, whichever that is."""
    service = await start_service()
    live, revoked = token_factory("worker", ["billing"]), token_factory("worker", ["billing"])
    foreign = await connect(service, live, name="foreign")
    late, both = [await connect(service, revoked, name=name) for name in ("late", "both")]
    revoke(revoked)
    queue_words, revoke_words = "token does not allow queue 'payroll'; it allows: ['billing']", "was revoked"
    first = next(g for g in CHARTS["instance"].refusal_order("register") if g in (QUEUES_ALLOWED, TOKEN_LIVE))
    cases = [(foreign, ["billing", "payroll"], queue_words), (late, ["billing"], revoke_words),
             (both, ["payroll", "billing"], queue_words if first == QUEUES_ALLOWED else revoke_words)]
    for worker, queues, words in cases:
        error = worker.assert_error(await worker.hello(queues), "permission_denied", fatal=True)
        assert words in error["message"], (worker.name, error["message"])
        await worker.expect_close(1008)


async def test_a_revoked_tokens_refusal_is_worded_as_a_revoke_even_for_a_hello_naming_a_foreign_queue(
        start_service, connect, token_factory, revoke):
    """The other guard order than the chart's: the store found the token revoked (a refusal from ``token_live``)
    for a hello that also names a queue outside the token. The session words it from that guard, as a revoke,
    not from the queues it can see are not allowed. The chart checks the queues first, so no hello gets there
    over the wire: the refusal is the store's own, from a registration that allows every queue."""
    service = await start_service()
    token = token_factory("worker", ["billing"])
    await connect(service, token, name="both")
    with trio.fail_after(5):
        while not service.connections:
            await trio.sleep(0.01)
    (connection,) = service.connections
    # A session of the connection's parts, built on this task, so this task is its owner (ownership_support).
    session = LiveSession(connection.endpoint.sessions, connection.session.token, connection)
    revoke(token)
    refusal = await service.store.run(
        instances.register, now=service.clock.now(),
        instance=NewInstance("both", (SubscribedQueue("payroll"),), token_id=session.token.token_id))
    assert isinstance(refusal, Refusal) and refusal.guard == TOKEN_LIVE, refusal
    hello = m.WorkerHello(id="h1", worker_name="both", subscriptions=(Subscription("payroll"),))
    message = session._hello_refusal(hello, refusal)
    assert "was revoked" in message and "does not allow" not in message, message


async def test_wrong_or_missing_subprotocol_gets_400(start_service, worker_token):
    service = await start_service()
    for offered in ((), ("pulse.worker.v2",), ("chat",)):
        refusal = await harness.rejected(service.worker_port, worker_token, subprotocols=offered)
        assert refusal.status_code == 400, offered


async def test_wrong_path_gets_404(start_service, worker_token):
    service = await start_service()
    for path in ("/", "/v1/workers", "/v2/worker", "/v1/worker/x"):
        refusal = await harness.rejected(service.worker_port, worker_token, path=path)
        assert refusal.status_code == 404, path


async def test_foreign_queue_is_permission_denied_fatal_without_session_id(start_service, connect, token_factory):
    service = await start_service()
    worker = await connect(service, token_factory("worker", ["billing"]))
    reply = await worker.hello(["billing", "payroll"])
    worker.assert_error(reply, "permission_denied", fatal=True)
    assert "session_id" not in reply and reply["reply_to"] == "h1"
    await worker.expect_close(1008)


async def test_no_hello_within_the_timeout_is_hello_required(start_service, connect, worker_token):
    service = await start_service(hello_timeout=0.3)
    worker = await connect(service, worker_token)
    frame = await worker.expect_error("hello_required", fatal=True, reply_to=harness.ABSENT)
    assert "session_id" not in frame
    await worker.expect_close(1008)


async def test_a_first_frame_that_is_not_hello_is_hello_required(start_service, connect, worker_token):
    service = await start_service()
    worker = await connect(service, worker_token)
    frame = worker.frame("worker.capacity", {"sequence": "1", "capacity": 1, "drain": False},
                         session_id="ses_01KBFEY3G0B1BKY7SP31HF1KWA")
    await worker.send(frame)
    error = await worker.expect_error("hello_required", fatal=True, reply_to=frame["id"])
    assert "session_id" not in error
    await worker.expect_close(1008)


async def test_second_hello_is_a_non_fatal_invalid_transition(start_service, connect, worker_token):
    service = await start_service()
    worker = await connect(service, worker_token)
    welcome = await worker.register(["billing"])
    reply = await worker.hello(["mail"], id="h2")
    worker.assert_error(reply, "invalid_transition")
    assert reply["session_id"] == worker.session_id
    # Nothing changed: same instance, and the session still works.
    worker.subscriptions = {"billing": None}
    ack = await worker.capacity_ok(2)
    assert ack["instance_id"] == welcome["instance_id"] and ack["epoch"] == welcome["epoch"]


async def test_invalid_hello_is_invalid_frame_and_the_session_can_still_register(start_service, connect,
                                                                                 worker_token):
    service = await start_service()
    worker = await connect(service, worker_token)
    bad = {"protocol_version": "1", "type": "worker.hello", "id": "h0",
           "body": {"worker_name": "x", "subscriptions": []}}
    await worker.send_text(json.dumps(bad))
    error = await worker.expect_error("invalid_frame", fatal=False, reply_to="h0")
    assert "session_id" not in error
    await worker.register(["billing"])


async def test_a_hello_at_the_subscription_limits_registers(start_service, connect, token_factory):
    """64 queues of 64 kinds, names of 64 characters: about 290 KB of subscriptions, within the frame limit."""
    service = await start_service()
    subscriptions = {f"q{q:02d}".ljust(64, "x"): [f"k{q:02d}.{k:02d}".ljust(64, "y") for k in range(64)]
                     for q in range(64)}
    w = await connect(service, token_factory("worker"), name="big")
    reply = await w.hello(subscriptions)
    assert reply["type"] == "worker.welcome", reply.get("error")


async def test_a_hello_registered_after_the_node_fenced_its_connection_leaves_no_ghost(start_service, connect,
                                                                                    worker_token, db):
    """A database stall longer than the node lapse: the node fences (every connection is told
    server_shutting_down), then the hello that waited for its registration commits. Its connection is
    closing and drops the welcome, but the session it registered is still ended with the connection."""
    import trio

    from pulse_trio.store.engine.writer import connect as db_connect

    service = await start_service(node_heartbeat=0.2, node_lapse=1.0)
    w = await connect(service, worker_token, name="during-stall")
    holder = await trio.to_thread.run_sync(db_connect, db)
    try:  # the stall: the registration share-locks the node's row first
        await trio.to_thread.run_sync(holder.cursor().execute,
                                      "SELECT state FROM server_nodes WHERE node_id = %s FOR UPDATE",
                                      (service.store.node_id,))
        async with trio.open_nursery() as nursery:

            async def hello():
                try:
                    await w.hello(["billing"])
                except harness.ConnectionEnded:
                    pass

            nursery.start_soon(hello)
            with trio.fail_after(10):
                while not service.node.fenced:
                    await trio.sleep(0.05)
            await trio.sleep(0.3)  # the shutdown reaches the connection
            await trio.to_thread.run_sync(holder.rollback)
    finally:
        await trio.to_thread.run_sync(holder.close)
    with trio.fail_after(10):
        while service.connections:
            await trio.sleep(0.05)
        query = "SELECT state FROM worker_instances WHERE worker_name = 'during-stall'"
        while await trio.to_thread.run_sync(rows, db, query) != [("DISCONNECTED",)]:  # registered, then ended
            await trio.sleep(0.05)


async def test_a_token_that_cannot_be_looked_up_gets_http_503_and_retry_after(start_service, connect, worker_token,
                                                                               db):
    """The database cannot answer the lookup (here its table is away for a moment): a plain 503, never a drop."""
    service = await start_service()
    rows(db, "RENAME TABLE api_tokens TO api_tokens_away")
    try:
        refusal = await harness.rejected(service.worker_port, worker_token)
    finally:
        rows(db, "RENAME TABLE api_tokens_away TO api_tokens")
    assert refusal.status_code == 503
    assert dict(refusal.headers)[b"retry-after"] == b"1" and b"retry later" in refusal.body
    welcome = await (await connect(service, worker_token)).hello(["billing"])  # and the next is as before
    assert welcome["type"] == "worker.welcome"
