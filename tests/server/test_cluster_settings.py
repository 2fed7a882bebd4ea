"""Cluster settings with real processes: one value for every `serve` instance, the CLI and the client.

Every process here is a real `pulse-trio serve` or `pulse-trio` command on
the test's database; the settings travel only through the database.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import subprocess
import sys
import urllib.request
import warnings
from pathlib import Path

import trio

import serve_process
from pulse_trio.client import Client
from pulse_trio.server.settings_sync import REFRESH_S
from sql_support import rows as sql_rows

UTC = dt.timezone.utc
FAST = ("--poll-interval", "0.05", "--log-format", "text")
SLACK = 1.5  # a timers tick, a refresh read, and a loaded 2-core machine


@dataclasses.dataclass
class Instance:
    process: trio.Process
    worker_port: int
    http_port: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text()

    async def readyz(self) -> dict:
        def get() -> dict:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/readyz", timeout=10) as answer:
                return json.loads(answer.read())
        return await trio.to_thread.run_sync(get)

    async def post(self, path: str, token: str, body: dict) -> dict:
        def send() -> dict:
            request = urllib.request.Request(f"http://127.0.0.1:{self.http_port}{path}", data=json.dumps(body).encode(),
                                             headers={"Authorization": f"Bearer {token}",
                                                      "Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as answer:
                return json.loads(answer.read())
        return await trio.to_thread.run_sync(send)


@contextlib.asynccontextmanager
async def serving(db, tmp_path: Path, name: str, *flags: str):
    """A `serve` process with ``flags``, its log in ``tmp_path``; stopped gracefully at the end."""
    log_path = tmp_path / f"{name}.log"
    with log_path.open("w") as log:
        process, worker_port, http_port = await serve_process.start_on_free_ports(db, *FAST, *flags, log=log)
    try:
        yield Instance(process, worker_port, http_port, log_path)
    finally:
        if process.poll() is None:
            process.terminate()
            with trio.move_on_after(20):
                await process.wait()
            if process.poll() is None:
                process.kill()


async def cli(db, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`pulse-trio ARGS` as a user runs it, with ``env`` added to the environment."""
    import os

    return await trio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "pulse_trio", *args, "--database-url", db.url(redact=False)],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}))


async def query(db, sql: str, args=()) -> list[tuple]:
    return await trio.to_thread.run_sync(sql_rows, db, sql, args)


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- the three cases of the issue ---------------------------------------------------------------

async def test_a_cli_cancel_against_a_cluster_with_a_2s_grace_gets_a_2s_grace(db, connect, worker_token, tmp_path):
    # The CLI runs with a stale environment and a stale (deprecated) flag: neither may matter.
    stale = {"PULSE_CANCEL_GRACE": "30"}
    async with serving(db, tmp_path, "serve", "--cancel-grace", "2") as instance:
        w = await connect(instance.worker_port, worker_token)
        await w.register(["billing"], capacity=1)
        done = await cli(db, "submit", "--queue", "billing", "--kind", "invoice.send", env=stale)
        assert done.returncode == 0, done.stderr
        held = await w.expect_assign()
        await w.ok(w.start(held))
        done = await cli(db, "task", "cancel", held.task_id, "--cancel-grace", "30", env=stale)
        cancelled_at = trio.current_time()
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["cancel_changed"] is True
        assert "--cancel-grace is deprecated and ignored" in done.stderr
        ((requested, grace),) = await query(db, "SELECT requested_at, grace_expires_at FROM cancel_intents"
                                                " WHERE task_id = %s", (held.task_id,))
        assert grace - requested == dt.timedelta(seconds=2)
        # This worker ignores the cancel: its lease ends at the 2 s deadline, not after 30 s.
        w.forget(held)
        with trio.fail_after(2 + SLACK + 5):
            while (await query(db, "SELECT state FROM tasks WHERE task_id = %s", (held.task_id,)))[0][0] != "CANCELLED":
                await trio.sleep(0.05)
        assert trio.current_time() - cancelled_at <= 2 + SLACK
        ((code,),) = await query(db, "SELECT error_code FROM task_attempts WHERE task_id = %s", (held.task_id,))
        assert code == "cancel_timeout"


async def test_two_instances_and_a_client_see_one_priority_order(db, connect, worker_token, token_factory,
                                                                 tmp_path):
    producer = token_factory("producer")
    base = dt.datetime.now(UTC) - dt.timedelta(minutes=5)  # every task is due: only priority and due time order
    # With the cluster's step of 2 s: Z (base-1) < X (base) < Y (base+1) < W (base+2).
    # With a stale 30 s step the order would be W, Z, Y, X.
    async with serving(db, tmp_path, "a", "--priority-step", "2") as a, serving(db, tmp_path, "b") as b:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            client = Client(db, priority_step=30)
        assert any(issubclass(c.category, DeprecationWarning) and "priority_step" in str(c.message) for c in caught)
        with client:
            x = (await trio.to_thread.run_sync(lambda: client.submit("billing", "k", due_at=base)))["task_id"]
        y = (await a.post("/v1/tasks", producer, {"queue": "billing", "kind": "k", "priority": 1,
                                                   "due_at": rfc3339(base + dt.timedelta(seconds=3))}))["task_id"]
        z = (await b.post("/v1/tasks", producer, {"queue": "billing", "kind": "k", "priority": 2,
                                                   "due_at": rfc3339(base + dt.timedelta(seconds=3))}))["task_id"]
        done = await cli(db, "submit", "--queue", "billing", "--kind", "k", "--priority", "3", "--due-at",
                         rfc3339(base + dt.timedelta(seconds=8)), "--priority-step", "30",
                         env={"PULSE_PRIORITY_STEP": "30"})
        assert done.returncode == 0, done.stderr
        w_ = json.loads(done.stdout)["task_id"]
        offsets = dict(await query(db, "SELECT task_id, TIMESTAMPDIFF(MICROSECOND, effective_at, due_at)"
                                       " FROM tasks"))
        assert offsets == {x: 0, y: 2_000_000, z: 4_000_000, w_: 6_000_000}

        # A worker on instance b takes two, one at a time; then one on instance a takes the rest.
        seen = []
        on_b = await connect(b.worker_port, worker_token, name="on-b")
        await on_b.register(["billing"], capacity=1)
        for last in (False, True):
            held = await on_b.expect_assign()
            seen.append(held.task_id)
            await on_b.ok(on_b.start(held))
            if last:
                await on_b.capacity_ok(0)
            await on_b.ok(on_b.finish(held))
        on_a = await connect(a.worker_port, worker_token, name="on-a")
        await on_a.register(["billing"], capacity=1)
        for _ in range(2):
            held = await on_a.expect_assign()
            seen.append(held.task_id)
            await on_a.ok(on_a.start(held))
            await on_a.ok(on_a.finish(held))
        assert seen == [z, x, y, w_]


async def test_a_value_changed_on_the_cluster_is_picked_up_by_a_running_instance(db, connect, worker_token,
                                                                                 tmp_path):
    flags = ("--lease-ttl", "30", "--node-heartbeat", "0.5", "--node-lapse", "2")
    async with serving(db, tmp_path, "serve", *flags) as instance:
        before = await connect(instance.worker_port, worker_token, name="before")
        assert (await before.register(["billing"], capacity=0))["lease_ttl_ms"] == 30_000
        # Its liveness flags replaced the defaults (said once, at start); 30 s over the default 30 s is no news.
        assert {c["name"] for c in (await instance.readyz())["settings_conflicts"]} == {"node_heartbeat",
                                                                                        "node_lapse"}
        ((node_id, lapse_ms),) = await query(db, "SELECT node_id, lapse_ms FROM server_nodes")
        assert lapse_ms == 2_000

        done = await cli(db, "settings", "set", "lease_ttl", "3", "start_timeout", "4", "node_lapse", "5")
        changed = trio.current_time()
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["settings"]["lease_ttl"]["value"] == 3
        def lease_ttl_conflict(ready: dict) -> dict | None:
            return next((c for c in ready["settings_conflicts"] if c["name"] == "lease_ttl"), None)

        with trio.fail_after(REFRESH_S + SLACK + 5):
            while (conflict := lease_ttl_conflict(await instance.readyz())) is None:
                await trio.sleep(0.05)
        assert trio.current_time() - changed <= REFRESH_S + SLACK
        assert (conflict["flag"], conflict["cluster"]) == (30, 3)
        assert conflict["cluster_by"].startswith("cli@") and "no longer applies" in conflict["message"]
        line = next(line for line in instance.log().splitlines() if "lease_ttl changed from 30 s to 3 s" in line)
        assert " warning " in line and "--lease-ttl 30 s no longer applies" in line

        # What the running instance does from now on follows the cluster.
        after = await connect(instance.worker_port, worker_token, name="after")
        welcome = await after.register(["billing"], capacity=1)
        assert (welcome["lease_ttl_ms"], welcome["start_timeout_ms"]) == (3_000, 4_000)
        client = Client(db)
        await trio.to_thread.run_sync(lambda: client.submit("billing", "k"))
        client.close()
        held = await after.expect_assign()
        ((offered, expires),) = await query(db, "SELECT offered_at, expires_at FROM leases")
        assert expires - offered == dt.timedelta(seconds=4)
        await after.ok(after.start(held))
        assert await query(db, "SELECT ttl_ms FROM leases") == [(3_000,)]
        with trio.fail_after(0.5 + SLACK + 5):  # the next heartbeat writes the node's new lapse
            while (await query(db, "SELECT lapse_ms FROM server_nodes WHERE node_id = %s", (node_id,)))[0][0] != 5_000:
                await trio.sleep(0.05)
        await after.ok(after.finish(held))


# -- flags that disagree ------------------------------------------------------------------------

async def test_two_instances_started_with_different_values_say_so(db, tmp_path):
    async with serving(db, tmp_path, "first", "--cancel-grace", "2") as first:
        first_node = (await query(db, "SELECT node_id FROM server_nodes"))[0][0]
        (replaced_default,) = (await first.readyz())["settings_conflicts"]
        assert (replaced_default["flag"], replaced_default["replaced"], replaced_default["replaced_by"]) == (2, 30, None)
        assert "replaces the stored 30 s (the default, never set)" in first.log()
        async with serving(db, tmp_path, "second", "--cancel-grace", "5") as second:
            (conflict,) = (await second.readyz())["settings_conflicts"]
            assert conflict == {
                "name": "cancel_grace", "flag": 5, "replaced": 2, "replaced_by": f"serve:{first_node}",
                "cluster": 5, "cluster_by": conflict["cluster_by"], "message": conflict["message"]}
            assert conflict["cluster_by"].startswith("serve:nod_") and conflict["cluster_by"] != f"serve:{first_node}"
            assert "replaced the cluster's 2 s" in conflict["message"]
            line = next(line for line in second.log().splitlines() if "cluster setting cancel_grace" in line)
            assert " warning " in line and "--cancel-grace 5 s replaces the stored 2 s" in line and first_node in line
            # The first instance follows the cluster, and says its flag no longer applies.
            with trio.fail_after(REFRESH_S + SLACK + 5):
                while (await first.readyz())["settings_conflicts"][0]["cluster"] != 5:
                    await trio.sleep(0.05)
            assert "no longer applies" in (await first.readyz())["settings_conflicts"][0]["message"]


async def test_serve_refuses_a_flag_the_cluster_refuses_before_it_listens(db, tmp_path):
    done = await cli(db, "settings", "set", "node_lapse", "15")
    assert done.returncode == 0, done.stderr
    started = await trio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-m", "pulse_trio", "serve", "--database-url", db.url(redact=False), "--worker-listen",
         f"127.0.0.1:{serve_process.free_port()}", "--http-listen", f"127.0.0.1:{serve_process.free_port()}",
         "--node-heartbeat", "10"], capture_output=True, text=True, timeout=60))
    assert started.returncode == 2, started
    assert "node_lapse (15 s) must be at least twice node_heartbeat (10 s)" in started.stderr
    assert await query(db, "SELECT node_id FROM server_nodes") == []  # it never recorded itself
    assert await query(db, "SELECT value_ms FROM cluster_settings WHERE name = 'node_heartbeat'") == [(5_000,)]


# -- liveness while heartbeat and lapse change ---------------------------------------------------

async def test_changing_heartbeat_and_lapse_never_makes_a_live_instance_look_lost(start_service, db):
    """Shrink and grow both, several times, under two running instances: neither is ever declared lost."""
    first = await start_service(node_heartbeat=1, node_lapse=3, poll_interval=0.05)
    second = await start_service(poll_interval=0.05)
    client = Client(db)
    try:
        for heartbeat, lapse in ((0.2, 1), (1, 2.5), (0.25, 1), (2, 5)):
            await trio.to_thread.run_sync(lambda: client.set_settings(
                {"node_heartbeat": str(heartbeat), "node_lapse": str(lapse)}, updated_by="test"))
            await trio.sleep(2.5)  # a refresh, a few heartbeats and sweeps at the new values
            assert await query(db, "SELECT node_id FROM server_nodes WHERE state <> 'ALIVE'") == []
    finally:
        client.close()
    for instance in (first, second):
        assert instance.metrics.nodes_declared_lost == 0 and instance.metrics.node_rejoins == 0
        assert instance.metrics.node_fenced == 0  # nor does it take itself for cut off
        assert (instance.settings.node_heartbeat, instance.settings.node_lapse) == (2, 5)
    assert await query(db, "SELECT DISTINCT lapse_ms FROM server_nodes") == [(5_000,)]


async def test_shrinking_heartbeat_and_lapse_does_not_fence_a_healthy_instance(start_service, connect, worker_token,
                                                                               db):
    """From the defaults to a lapse shorter than the wait for the heartbeat already scheduled: the sessions stay."""
    service = await start_service(poll_interval=0.05)
    started, heartbeat = trio.current_time(), service.settings.node_heartbeat  # its node is recorded: a beat landed
    worker = await connect(service, worker_token)
    await worker.register(["billing"], capacity=1)
    ((node_id,),) = await query(db, "SELECT node_id FROM server_nodes")
    await trio.sleep_until(started + 1.6)  # that beat is older than the new lapse
    with Client(db) as client:  # one transaction, as `settings set node_heartbeat 0.5 node_lapse 1.5`
        await trio.to_thread.run_sync(lambda: client.set_settings({"node_heartbeat": "0.5", "node_lapse": "1.5"},
                                                                  updated_by="test"))
    await service.settings_sync.refresh()  # what the instance that served a PATCH does at once
    service.node.check_cut_off()  # what its cut-off watch does next, before another heartbeat can land
    assert service.metrics.node_fenced == 0, "a healthy instance fenced itself and ended its worker sessions"
    with trio.fail_after(heartbeat + SLACK + 5):
        while (await query(db, "SELECT lapse_ms FROM server_nodes WHERE node_id = %s", (node_id,)))[0][0] != 1_500:
            await trio.sleep(0.05)
    assert trio.current_time() < started + heartbeat - 1  # at the new pace, not when the old interval said
    await trio.sleep_until(started + heartbeat + SLACK)  # past the beat the old interval had scheduled
    assert service.metrics.node_fenced == 0
    assert len(service.connections) == 1


async def test_flags_given_while_the_schema_is_missing_are_written_once_it_is_there(database_server, nursery):
    from pulse_trio.config import Settings
    from pulse_trio.dburl import create_database, drop_database
    from pulse_trio.serve import serve
    from pulse_trio.store.schema.migrate import migrate

    config = database_server.with_database("pulse_settings_late")
    create_database(config)
    settings = Settings(worker_listen=("127.0.0.1", 0), http_listen=("127.0.0.1", 0), poll_interval=0.05).override(
        cancel_grace=2, node_heartbeat=0.2, node_lapse=1)
    try:
        handle = await nursery.start(lambda task_status: serve(settings, config, handle_signals=False,
                                                               task_status=task_status))
        assert not handle.settings_sync.loaded and handle.node is not None
        await trio.to_thread.run_sync(migrate, config)
        with trio.fail_after(10):  # the node is recorded only once the settings are read (and its flags written)
            while not await query(config, "SELECT node_id FROM server_nodes"):
                await trio.sleep(0.05)
        assert handle.settings_sync.loaded
        assert await query(config, "SELECT value_ms, state FROM cluster_settings WHERE name = 'cancel_grace'") == [
            (2_000, "SET")]
        assert await query(config, "SELECT lapse_ms FROM server_nodes") == [(1_000,)]
        handle.stop()
        with trio.fail_after(10):  # its last write: then the database can go
            while await query(config, "SELECT state FROM server_nodes") != [("STOPPED",)]:
                await trio.sleep(0.05)
    finally:
        drop_database(config)
