"""Several instances on one database: shared work, shared timers, stop and SIGKILL."""

from __future__ import annotations

import json
import signal

import trio

import harness
import serve_process


async def test_two_instances_share_the_queue_and_a_worker_on_each_gets_work(start_service, connect,
                                                                              worker_token, client):
    one = await start_service()
    two = await start_service()
    a = await connect(one, worker_token, name="a")
    b = await connect(two, worker_token, name="b")
    await a.register(["billing"], capacity=3)
    await b.register(["billing"], capacity=3)
    assert b.epoch > a.epoch  # one cluster-wide counter, whichever instance registers
    tasks = {client.submit("billing", "invoice.send", {"n": i})["task_id"] for i in range(6)}
    got_a = [await a.expect_assign() for _ in range(3)]
    got_b = [await b.expect_assign() for _ in range(3)]
    assert {h.task_id for h in got_a + got_b} == tasks  # each task offered once, across instances
    for w, held in [(a, h) for h in got_a] + [(b, h) for h in got_b]:
        await w.ok(w.start(held))
        await w.ok(w.finish(held))
    assert {client.get(t)["state"] for t in tasks} == {"SUCCEEDED"}


async def test_a_session_on_one_instance_gets_its_slots_back_when_another_instances_timers_end_its_leases(
        start_service, connect, worker_token, client):
    """Timers on every instance share the work (SKIP LOCKED): a lapse may be done by the other one."""
    here = await start_service(start_timeout=0.3)
    await start_service(start_timeout=0.3)  # a second instance whose timers compete for the lapses
    w = await connect(here, worker_token)
    await w.register(["billing"], capacity=1)
    task = client.submit("billing", "invoice.send", {})
    for _ in range(4):  # each lapse is done by either instance
        held = await w.expect_assign(timeout=10)
        assert held.task_id == task["task_id"]
        w.forget(held)
    final = await w.expect_assign(timeout=10)
    await w.ok(w.start(final))
    await w.ok(w.finish(final))


async def test_resume_on_another_instance(start_service, connect, worker_token, client):
    one = await start_service()
    two = await start_service()
    old = await connect(one, worker_token, name="old")
    await old.register(["billing"], capacity=1)
    client.submit("billing", "invoice.send", {})
    held = await old.expect_assign()
    await old.ok(old.start(held))
    new = await connect(two, worker_token, name="new")
    await new.register(["billing"], capacity=1)
    await new.ok(new.resume(old, held))
    old.assert_error(await old.renew(held), "lease_not_owned")
    # The old session (still connected on the first instance) gets work again.
    follow_up = client.submit("billing", "invoice.send", {})
    old.forget(held)
    assert (await old.expect_assign()).task_id == follow_up["task_id"]
    moved = new.live[held.lease_id]
    await new.ok(new.finish(moved))


async def test_graceful_stop_says_server_shutting_down_then_closes_1001_and_leases_survive(
        start_service, connect, worker_token, client):
    stopping = await start_service()
    staying = await start_service()
    old = await connect(stopping, worker_token, name="old")
    idle = await connect(stopping, worker_token, name="idle")
    await old.register(["billing"], capacity=1)
    client.submit("billing", "invoice.send", {})
    held = await old.expect_assign()
    await old.ok(old.start(held))
    stopping.stop()
    for w in (old, idle):
        frame = await w.expect_error("server_shutting_down", fatal=True, reply_to=harness.ABSENT)
        if w is old:
            assert frame["session_id"] == old.session_id
        else:  # never registered: no session to name
            assert "session_id" not in frame
        await w.expect_close(1001)
    new = await connect(staying, worker_token, name="new")
    await new.register(["billing"], capacity=1)
    lease = await new.ok(new.resume(old, held))
    assert lease["state"] == "RUNNING"
    await new.ok(new.finish(new.live[held.lease_id]))
    assert client.get(held.task_id)["state"] == "SUCCEEDED"


async def test_a_connection_that_never_said_hello_is_told_too_without_session_id(start_service, connect,
                                                                                 worker_token):
    service = await start_service()
    w = await connect(service, worker_token)
    service.stop()
    frame = await w.expect_error("server_shutting_down", fatal=True, reply_to=harness.ABSENT)
    assert "session_id" not in frame
    await w.expect_close(1001)


async def test_a_stopped_instance_accepts_no_new_connections(start_service, worker_token):
    service = await start_service()
    port = service.worker_port
    service.stop()
    with trio.fail_after(10):
        while service.connections:
            await trio.sleep(0.01)
        while True:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                break
            await stream.aclose()
            await trio.sleep(0.02)


async def test_sigkill_of_one_instance_then_resume_on_the_other(db, start_service, connect, worker_token, client):
    process, port, _ = await serve_process.start_on_free_ports(db, "--lease-ttl", "30", "--start-timeout", "30")
    try:
        victim = await connect(port, worker_token, name="victim")
        await victim.register(["billing"], capacity=2)
        client.submit("billing", "invoice.send", {"n": 1})
        client.submit("billing", "invoice.send", {"n": 2})
        running = await victim.expect_assign()
        offered = await victim.expect_assign()
        await victim.ok(victim.start(running))
        await victim.ok(victim.renew(running))
        process.send_signal(signal.SIGKILL)
        with trio.fail_after(10):
            await process.wait()
        assert process.returncode == -signal.SIGKILL
        await victim.expect_close(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    survivor = await start_service()
    new = await connect(survivor, worker_token, name="new")
    await new.register(["billing"], capacity=2)
    lease = await new.ok(new.resume(victim, running))
    assert lease["state"] == "RUNNING" and int(lease["revision"]) == running.revision + 1
    assert (await new.ok(new.resume(victim, offered)))["state"] == "OFFERED"
    for held in (new.live[running.lease_id], new.live[offered.lease_id]):
        if held.state == "OFFERED":
            await new.ok(new.start(held))
        await new.ok(new.finish(held))
    assert client.get(running.task_id)["state"] == "SUCCEEDED"
    assert client.get(running.task_id)["attempt"] == 1
    assert client.get(offered.task_id)["state"] == "SUCCEEDED"


async def test_sigterm_of_a_serve_process_is_a_graceful_stop(db, connect, worker_token, client):
    process, port, _ = await serve_process.start_on_free_ports(db)
    try:
        w = await connect(port, worker_token)
        await w.register(["billing"], capacity=1)
        client.submit("billing", "invoice.send", {})
        held = await w.expect_assign()
        await w.ok(w.start(held))
        process.send_signal(signal.SIGTERM)
        await w.expect_error("server_shutting_down", fatal=True, reply_to=harness.ABSENT)
        await w.expect_close(1001)
        with trio.fail_after(20):
            assert await process.wait() == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert client.get(held.task_id)["state"] == "RUNNING"  # the lease is left for a resume elsewhere


async def test_a_second_signal_while_a_serve_process_stops_changes_nothing_but_a_warning(db, worker_token, client,
                                                                                          tmp_path):
    """Ctrl-C pressed twice: the second comes while the sessions close (a worker that never answers the close
    holds that up to the grace). The stop still ends the orderly way: node STOPPED, exit 0, no traceback."""
    log = tmp_path / "serve.log"
    with log.open("w") as output:
        process, port, _ = await serve_process.start_on_free_ports(db, "--log-level", "info", log=output)
    try:
        silent, _ = await harness.raw_upgrade(port, worker_token)
        process.send_signal(signal.SIGINT)
        await trio.sleep(0.5)
        process.send_signal(signal.SIGINT)
        with trio.fail_after(30):
            code = await process.wait()
        await silent.aclose()
    finally:
        if process.poll() is None:
            process.kill()
    text = log.read_text()
    assert code == 0 and "Traceback" not in text, text[-3000:]
    assert "SIGINT: already stopping" in text
    assert [node["state"] for node in client.nodes(include_stopped=True)] == ["STOPPED"]


async def test_a_fast_poll_does_not_make_the_timers_spin(start_service):
    """The dispatcher may poll every 10 ms; the timers' tick stays within 0.1-1 s (2 x poll)."""
    assert (await start_service(poll_interval=0.01)).timers.interval == 0.1
    assert (await start_service(poll_interval=0.2)).timers.interval == 0.4
    assert (await start_service(poll_interval=5)).timers.interval == 1.0


async def test_a_connection_whose_handshake_ends_after_the_stop_began_is_told_too(start_service, connect,
                                                                                     worker_token):
    """The stop tells the connections open when it begins; one whose upgrade was still under way is told
    as soon as it opens (server_shutting_down, 1001), not left to register and be cut off when the grace ends."""
    from websockets.client import ClientProtocol
    from websockets.frames import Opcode
    from websockets.uri import parse_uri

    service = await start_service()
    port = service.worker_port
    codec = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}{harness.PATH}"), subprotocols=[harness.SUBPROTOCOL])
    request = codec.connect()
    request.headers["Authorization"] = f"Bearer {worker_token}"
    codec.send_request(request)
    upgrade = b"".join(codec.data_to_send())
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    # A connection open when the stop begins that never answers its close: the stop waits for it (within
    # CLOSE_TIMEOUT_S), so the upgrade below is not raced by the stop's end, which would cut it unanswered.
    holder = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        await holder.send_all(upgrade)
        with trio.fail_after(5):
            while b"\r\n\r\n" not in (answer := await holder.receive_some(65536)):
                assert answer, "the holder's upgrade was not answered"
        await stream.send_all(upgrade[:-2])  # all but the blank line that ends the request
        # Accepted in order: once a later connection is open, the server has taken this one too.
        told = await connect(service, worker_token, name="told")
        service.stop()
        await told.expect_error("server_shutting_down", fatal=True, reply_to=harness.ABSENT)  # the stop has begun
        await stream.send_all(upgrade[-2:])
        frames = []
        with trio.fail_after(3):  # well within the stop's grace, which a connection nobody told would wait out
            while not any(f.opcode is Opcode.CLOSE for f in frames):
                data = await stream.receive_some(65536)
                if not data:
                    break
                codec.receive_data(data)
                frames += [event for event in codec.events_received() if hasattr(event, "opcode")]
    finally:
        await stream.aclose()
        await holder.aclose()
    texts = [json.loads(f.data) for f in frames if f.opcode is Opcode.TEXT]
    assert [t["error"]["code"] for t in texts] == ["server_shutting_down"], texts
    assert "session_id" not in texts[0] and "reply_to" not in texts[0]
    assert frames[-1].opcode is Opcode.CLOSE and int.from_bytes(frames[-1].data[:2], "big") == 1001, frames
