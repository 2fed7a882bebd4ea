"""One worker connection: a nursery around the sans-IO session.

Three tasks share the connection's nursery: the reader (frames in, through
:class:`~pulse_trio.session.ServerSession`, requests carried out through
the store), the writer (the only task that sends, draining a bounded
outbox), and the pinger. Lease commands run concurrently, at most
``MAX_IN_FLIGHT`` at a time: the reader stops reading while the limit is
reached, which is the backpressure a flooding client feels.

Nothing about a session's leases is decided here: a closing connection
leaves them valid until they expire, so the worker can resume them on a
new connection, on this instance or another.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import TYPE_CHECKING

import trio
import trio_websocket

from pulse_trio.contract import errors as e
from pulse_trio.contract import messages as m
from pulse_trio.contract.errors import FrameTooLarge
from pulse_trio.contract.grammar import new_id
from pulse_trio.contract.limits import MAX_CAPACITY, check_frame_size
from pulse_trio.server import views, ws_close
from pulse_trio.server.hub import LiveSession
from pulse_trio.session import Close, Reject, Request, ServerSession
from pulse_trio.store import instances, leases
from pulse_trio.store.results import Refusal
from pulse_trio.store.resume import ResumeRequest, resume
from pulse_trio.store.task_steps import FinishReport

if TYPE_CHECKING:
    from pulse_trio.server.service import ServiceContext
    from pulse_trio.tokens import TokenInfo

log = logging.getLogger("pulse_trio.connection")
ws_close.install()  # close unparsable frames with their code (1007), not a bare TCP drop

MAX_IN_FLIGHT = 64
# Every frame the outbox can hold is bounded by the protocol: at most
# `capacity` offers outstanding, at most MAX_IN_FLIGHT answers, a few pushes.
OUTBOX_SIZE = MAX_CAPACITY + MAX_IN_FLIGHT + 16
INTERNAL_RETRY_AFTER_MS = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class _CloseAfter:
    code: int
    reason: str


class WorkerConnection:
    """Drives one accepted WebSocket until either side ends it."""

    def __init__(self, ws: trio_websocket.WebSocketConnection, token: TokenInfo, ctx: ServiceContext) -> None:
        self.ws = ws
        self.token = token
        self.ctx = ctx
        self.session = ServerSession(new_id("ses_"))
        self.live: LiveSession | None = None
        self._outbox, self._outbox_out = trio.open_memory_channel[str | _CloseAfter](OUTBOX_SIZE)
        self._in_flight = trio.Semaphore(MAX_IN_FLIGHT)
        self._cancel_scope: trio.CancelScope | None = None

    # -- lifecycle ---------------------------------------------------------
    async def run(self) -> None:
        self.ctx.connections.add(self)
        try:
            async with trio.open_nursery() as nursery:
                self._cancel_scope = nursery.cancel_scope
                nursery.start_soon(self._write_loop)
                nursery.start_soon(self._ping_loop)
                await self._read_loop(nursery)
                # The reader is done: let queued answers go out, then stop.
                self._outbox.close()
        finally:
            self.ctx.connections.discard(self)
            with trio.CancelScope(shield=True):
                await self._release()

    def push(self, frame: str) -> bool:
        """Queue a server push (assign, cancel); False if the connection is ending."""
        try:
            self._outbox.send_nowait(frame)
            return True
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            return False

    def shutdown(self) -> None:
        """Send server_shutting_down and close (the instance is stopping)."""
        reject = self.session.shutdown()
        if reject.frame:
            self.push(reject.frame)
        self._queue_close(e.CLOSE_GOING_AWAY, "server shutting down")

    async def _release(self) -> None:
        if self.live is not None:
            self.ctx.hub.remove(self.live.session_id)
            self.live.closing = True
            with trio.move_on_after(10):
                try:
                    await self.ctx.store.run(instances.disconnect, session_id=self.session.session_id,
                                             now=self.ctx.clock.now())
                except Exception:  # the lease timers clean up after a lost disconnect
                    log.warning("disconnect of %s not recorded", self.session.session_id, exc_info=True)
        self.session.release()
        with trio.move_on_after(1):
            await self.ws.aclose()

    # -- reading -------------------------------------------------------------
    async def _read_loop(self, nursery: trio.Nursery) -> None:
        hello_deadline = trio.current_time() + self.ctx.settings.hello_timeout
        while True:
            try:
                text: str | bytes | None = None
                if self.session.state == "awaiting_hello":
                    with trio.move_on_at(hello_deadline):
                        text = await self.ws.get_message()
                    if text is None:
                        await self._fatal(self.session.fail(
                            e.HELLO_REQUIRED, f"no worker.hello within {self.ctx.settings.hello_timeout:g}s"))
                        return
                else:
                    text = await self.ws.get_message()
            except trio_websocket.ConnectionClosed:
                return
            if isinstance(text, bytes):
                self._queue_close(e.CLOSE_UNSUPPORTED_DATA, "binary frames are not part of pulse.worker.v1")
                return
            try:
                check_frame_size(text)
            except FrameTooLarge:
                self._queue_close(e.CLOSE_MESSAGE_TOO_BIG, "frame larger than 512 KiB")
                return
            self.ctx.metrics.count_frame_in(text)
            event = self.session.receive(text)
            del text
            if isinstance(event, Close):
                self._queue_close(event.code, event.reason)
                return
            if isinstance(event, Reject):
                if event.close_code is not None:
                    await self._fatal(event)
                    return
                self._send_reject(event)
                continue
            if not await self._carry_out(event, nursery):
                return

    async def _carry_out(self, request: Request, nursery: trio.Nursery) -> bool:
        """Do what a request asks; False when the connection must end."""
        message = request.message
        if isinstance(message, m.WorkerHello):
            return await self._hello(message)
        if isinstance(message, m.WorkerCapacity):
            await self._guarded(message.id, self._capacity(message))
            return True
        await self._in_flight.acquire()
        nursery.start_soon(self._command, message)
        return True

    async def _command(self, message: m.ClientMessage) -> None:
        try:
            if isinstance(message, m.WorkerResume):
                await self._guarded(message.id, self._resume(message))
            else:
                await self._guarded(message.id, self._lease_command(message))
        finally:
            self._in_flight.release()

    async def _guarded(self, reply_to: str, work) -> None:
        """Run one request's work; a storage failure becomes ``internal``."""
        try:
            await work
        except trio.Cancelled:
            raise
        except Exception:
            log.exception("request %s failed in the store", reply_to)
            if reply_to in self.session.pending():
                reject = self.session.refuse(reply_to, e.INTERNAL, "storage failure; retry later",
                                             retry_after_ms=INTERNAL_RETRY_AFTER_MS)
                self._send_reject(reject)

    # -- requests ------------------------------------------------------------
    async def _hello(self, hello: m.WorkerHello) -> bool:
        ctx = self.ctx
        new = instances.NewInstance(
            worker_name=hello.worker_name,
            subscriptions=instances.subscriptions_from([(s.queue, s.kinds) for s in hello.subscriptions]),
            cancellation_notifications=hello.cancellation_notifications,
            concurrency_keys=hello.concurrency_keys,
            client_json=json.dumps({"name": hello.client.name, "version": hello.client.version})
            if hello.client else None,
            token_id=self.token.token_id,
            session_id=self.session.session_id,
        )
        try:
            result = await ctx.store.run(instances.register, instance=new, now=ctx.clock.now(),
                                         allowed_queues=self.token.queues or None)
        except Exception:
            log.exception("registration failed in the store")
            await self._fatal(self.session.refuse(hello.id, e.INTERNAL, "storage failure; reconnect later",
                                                  fatal=True, retry_after_ms=INTERNAL_RETRY_AFTER_MS))
            return False
        if isinstance(result, Refusal):
            await self._fatal(self.session.refuse(hello.id, result.code, result.message or result.code))
            return False
        body = views.welcome(result.instance, lease_ttl_s=ctx.settings.lease_ttl,
                             start_timeout_s=ctx.settings.start_timeout, now=ctx.clock.now(),
                             secret=result.instance_secret)
        self._send(self.session.welcome(hello.id, body))
        self.live = LiveSession(
            session_id=self.session.session_id, instance_id=result.instance.instance_id,
            epoch=result.instance.epoch,
            queues={s.queue: (frozenset(s.kinds) if s.kinds is not None else None) for s in hello.subscriptions},
            concurrency_keys=hello.concurrency_keys,
            cancellation_notifications=hello.cancellation_notifications,
            connection=self,
        )
        ctx.hub.add(self.live)
        log.info("session registered", extra={"session_id": self.session.session_id,
                                               "instance_id": result.instance.instance_id})
        return True

    async def _capacity(self, msg: m.WorkerCapacity) -> None:
        ctx = self.ctx
        result = await ctx.store.run(instances.set_capacity, session_id=self.session.session_id,
                                     sequence=msg.sequence, capacity=msg.capacity, drain=msg.drain,
                                     now=ctx.clock.now())
        if isinstance(result, Refusal):
            self._send_reject(self.session.refuse(msg.id, e.INVALID_TRANSITION, result.message or result.code))
            return
        if result.applied:
            # The stored state decides drain: an operator's drain outlives drain=false frames.
            drain = result.instance.drain
            self.session.capacity_applied(msg.sequence, drain)
            assert self.live is not None
            self.live.capacity, self.live.drain = msg.capacity, drain
            self.live.active_leases = result.instance.active_leases
            ctx.hub.wake()
        body = views.welcome(result.instance, lease_ttl_s=ctx.settings.lease_ttl,
                             start_timeout_s=ctx.settings.start_timeout, now=ctx.clock.now())
        self._send(self.session.ack(msg.id, body))

    async def _lease_command(self, msg: m.TaskStart | m.TaskRenew | m.TaskFinish) -> None:
        ctx = self.ctx
        command = leases.LeaseCommand(session_id=self.session.session_id, task_id=msg.task_id,
                                      lease_id=msg.lease_id, lease_secret=msg.lease_secret,
                                      revision=msg.revision)
        report = None
        if isinstance(msg, m.TaskFinish):
            report = FinishReport(status=msg.status, result_json=str(msg.result),
                                  error_code=msg.error_code or None, error_message=msg.error_message or None,
                                  retryable=msg.retryable)
        kind = "finish" if report is not None else ("start" if isinstance(msg, m.TaskStart) else "renew")
        result = await ctx.batcher.submit(kind, command, report)
        if isinstance(result, Refusal):
            self._send_reject(self.session.refuse(msg.id, result.code, result.message or result.code))
            return
        if isinstance(msg, m.TaskFinish) and not result.receipt.duplicate and self.live is not None:
            self.live.active_leases = max(0, self.live.active_leases - 1)
            ctx.hub.slot_freed()
        ctx.metrics.count_command(msg, result)
        self._send(self.session.ack(msg.id, views.command_result(result)))

    async def _resume(self, msg: m.WorkerResume) -> None:
        ctx = self.ctx
        assert self.live is not None
        request = ResumeRequest(session_id=self.session.session_id, instance_id=msg.instance_id,
                                instance_secret=msg.instance_secret, task_id=msg.task_id,
                                lease_id=msg.lease_id, lease_secret=msg.lease_secret)
        result = await ctx.store.run(resume, request=request, now=ctx.clock.now(),
                                     start_timeout_ms=ctx.start_timeout_ms)
        if isinstance(result, Refusal):
            fatal = False if result.code == e.PERMISSION_DENIED else None
            self._send_reject(self.session.refuse(msg.id, result.code, result.message or result.code, fatal=fatal))
            return
        self.live.active_leases += 1
        # The lease left its previous owner: when that session lives here, free
        # its slot now (elsewhere, that instance's timers reconcile its count).
        for previous in ctx.hub:
            if previous.instance_id == msg.instance_id and previous is not self.live:
                previous.active_leases = max(0, previous.active_leases - 1)
                ctx.hub.wake()
        self._send(self.session.ack(msg.id, views.lease(result)))

    # -- writing -------------------------------------------------------------
    def _send(self, frame: str) -> None:
        """Queue an answer; the outbox is sized so that this never blocks."""
        try:
            self._outbox.send_nowait(frame)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        except trio.WouldBlock:  # cannot happen within the protocol's bounds
            log.error("outbox full for %s; closing", self.session.session_id)
            self._cancel()

    def _queue_close(self, code: int, reason: str) -> None:
        try:
            self._outbox.send_nowait(_CloseAfter(code, reason))
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            self._cancel()
        self._outbox.close()

    def _send_reject(self, reject: Reject) -> None:
        self.ctx.metrics.count_error(reject.code)
        self._send(reject.frame)

    async def _fatal(self, reject: Reject) -> None:
        self._send_reject(reject)
        self._queue_close(reject.close_code or e.CLOSE_POLICY_VIOLATION, reject.code)

    async def _write_loop(self) -> None:
        try:
            async for item in self._outbox_out:
                if isinstance(item, _CloseAfter):
                    with trio.move_on_after(2):
                        await self.ws.aclose(item.code, item.reason)
                    break
                check_frame_size(item)
                await self.ws.send_message(item)
                self.ctx.metrics.count_frame_out(item)
        except trio_websocket.ConnectionClosed:
            pass
        self._cancel()

    async def _ping_loop(self) -> None:
        interval = self.ctx.settings.ping_interval
        while True:
            await trio.sleep(interval)
            with trio.move_on_after(3 * interval) as scope:
                try:
                    await self.ws.ping()
                except trio_websocket.ConnectionClosed:
                    return
            if scope.cancelled_caught:
                log.info("pong missing for 3 intervals; closing %s", self.session.session_id)
                self._queue_close(e.CLOSE_POLICY_VIOLATION, "pong missing")
                return

    def _cancel(self) -> None:
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()
