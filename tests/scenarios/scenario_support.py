"""Helpers shared by the scenario modules: held leases, wire times, polling in virtual time."""

from __future__ import annotations

import trio

from pulse_trio.contract.grammar import parse_time


# -- leases as a worker holds them, and the operator's side -----------------------


class Held:
    """One lease a scenario ``Worker`` holds: its credentials and current revision.

    ``start``/``renew``/``finish`` send the command with the revision held
    and, on an ack that carries a lease, adopt its new revision (as a worker
    must). ``resume_on(new_worker)`` moves it to a newer session.
    """

    def __init__(self, worker, assign: dict) -> None:
        body = assign["body"]
        self.worker = worker
        self.task = body["task"]
        self.lease = body["lease"]
        self.secret = body["lease"]["lease_secret"]
        self.revision = body["lease"]["revision"]

    @property
    def task_id(self) -> str:
        return self.task["task_id"]

    @property
    def lease_id(self) -> str:
        return self.lease["lease_id"]

    @property
    def credentials(self) -> dict:
        return {"task_id": self.task_id, "lease_id": self.lease_id, "lease_secret": self.secret}

    def _adopt(self, reply: dict, lease: dict | None) -> dict:
        if reply["type"] == "ack" and lease is not None:
            self.lease = {**lease, "lease_secret": self.secret}
            self.revision = lease["revision"]
        return reply

    async def command(self, type_: str, revision: str | None = None, **extra) -> dict:
        reply = await self.worker.command(type_, self.credentials, revision or self.revision, **extra)
        return self._adopt(reply, reply["body"].get("lease") if reply["type"] == "ack" else None)

    async def start(self) -> dict:
        return await self.command("task.start")

    async def renew(self) -> dict:
        return await self.command("task.renew")

    async def finish(self, status: str = "SUCCEEDED", result=None, **extra) -> dict:
        if status != "SUCCEEDED":
            extra.setdefault("error_code", status.lower())
        return await self.command("task.finish", status=status, result={"ok": True} if result is None else result,
                                  **extra)

    async def resume_on(self, new_worker) -> dict:
        reply = await new_worker.resume(self.worker, self.credentials)
        if reply["type"] == "ack":
            self.worker = new_worker
        return self._adopt(reply, reply["body"] if reply["type"] == "ack" else None)


async def offered(worker) -> Held:
    """The next task.assign pushed to ``worker``."""
    return Held(worker, await worker.push("task.assign"))


async def running(worker) -> Held:
    """The next offer to ``worker``, started (the start must be acked)."""
    held = await offered(worker)
    reply = await held.start()
    assert reply["type"] == "ack", reply
    return held


def error_code(reply: dict) -> str | None:
    return reply["error"]["code"] if reply["type"] == "error" else None


def trio_time_of(service, wire_time: str) -> float:
    """The Trio clock reading at which a wire time (``…Z``) arrives on ``service``'s clock."""
    return service.clock.trio_time_at(parse_time(wire_time))


async def sleep_until_wire(service, wire_time: str, offset: float = 0.0) -> None:
    await trio.sleep_until(trio_time_of(service, wire_time) + offset)


async def eventually(probe, *, timeout: float = 120.0, step: float = 0.25):
    """Poll ``await probe()`` in virtual time until it returns something truthy."""
    with trio.fail_after(timeout):
        while True:
            value = await probe()
            if value:
                return value
            await trio.sleep(step)




# -- a node's liveness without a whole service ----------------------------------------


def lone_node(store, settings, clock):
    """The liveness of a node that serves no connections: its own live settings, metrics and no sessions."""
    from pulse_trio.server.live_settings import LiveSettings
    from pulse_trio.server.liveness import NodeLiveness
    from pulse_trio.server.metrics import ServiceMetrics

    return NodeLiveness(store=store, clock=clock, settings=LiveSettings(settings), metrics=ServiceMetrics(),
                        connections=set())
