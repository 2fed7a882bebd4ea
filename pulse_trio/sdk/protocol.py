"""The worker side of one ``pulse.worker.v1`` session, without any I/O.

Theory of operation (the mirror of ``pulse_trio.session.ServerSession``):
the transport asks this object to build each request (it assigns the
message id and remembers the request in the pending table), sends the
encoded frame, and hands every received text frame to :meth:`receive`,
which returns exactly one event:

* :class:`Answered` / :class:`Refused` — the ack or error for a pending
  request. The ack was decoded with ``ack_for=`` that request's type, so its
  body has the right shape, and it was checked against the request (same
  lease, same revision, the right command in the receipt);
* :class:`Offered` — a ``task.assign`` that passed every check (subscribed
  queue and kind, this session's epoch, keyed only if declared);
* :class:`CancelPushed` — a ``task.cancel`` push;
* :class:`Fatal` — an unsolicited fatal error: the server will close;
* :class:`Dropped` — a frame that is ignored (logged), e.g. a rejected
  offer, which then simply lapses on the server;
* :class:`Broken` — the server broke the contract in a way that makes the
  connection untrustworthy (an unreadable frame, a wrong ack): the transport
  drops the connection and the worker reconnects and resumes.

Validation follows docs/protocol.md §5: strict scanning, typed decoding
(counters, secrets, times, ``retry_of`` not the task itself), then the
session checks only this table can make.
"""

from __future__ import annotations

from typing import Any

from pulse_trio.contract import messages as m
from pulse_trio.contract.codec import decode_server, scan_frame
from pulse_trio.contract.errors import ProtocolError
from pulse_trio.contract.fast_server import try_decode_server
from pulse_trio.contract.frozen import frozen
from pulse_trio.contract.limits import MAX_FRAME_BYTES
from pulse_trio.sdk import frames as f
from pulse_trio.sdk.refusal import Fault, of_code
from pulse_trio.sdk.errors import CommandRefused, ProtocolViolation, WorkerRefused


#: A pending request: a message built by :meth:`ClientProtocol.request`, or a lease command's record.
Request = m.ClientMessage | f.LeaseRequest


@frozen
class Answered:
    request: Request
    body: m.AckBody


@frozen
class Refused:
    request: Request
    error: m.Error


@frozen
class Offered:
    message: m.TaskAssign


@frozen
class CancelPushed:
    message: m.TaskCancel


@frozen
class Fatal:
    error: m.Error


@frozen
class Dropped:
    reason: str
    offer: bool = False  # a task.assign that was refused (it will lapse)


@frozen
class Broken:
    reason: str
    request: Request | None = None


Event = Answered | Refused | Offered | CancelPushed | Fatal | Dropped | Broken


def refusal(error: m.Error) -> CommandRefused:
    return CommandRefused(error.code, error.message, fatal=error.fatal, retry_after_ms=error.retry_after_ms)


def read_welcome(hello: m.WorkerHello, text: str | bytes, *, strict: bool) -> m.WorkerWelcome:
    """The answer to our hello; raises WorkerRefused, CommandRefused or ProtocolViolation."""
    try:
        message = decode_server(scan_frame(text), strict=strict)
    except ProtocolError as exc:
        raise ProtocolViolation(f"unreadable answer to worker.hello: {exc}") from None
    if isinstance(message, m.Error):
        if of_code(message.code) is not Fault.TRANSIENT:
            raise WorkerRefused(f"the service refused this worker: {message.code}: {message.message}",
                                code=message.code, detail=message.message)
        raise refusal(message)
    if not isinstance(message, m.WorkerWelcome) or message.reply_to != hello.id:
        raise ProtocolViolation(f"expected worker.welcome answering {hello.id!r}, got {type(message).TYPE}")
    return message


class ClientProtocol:
    """Pending requests and the checks on what the server sends, for one session."""

    def __init__(self, welcome: m.WorkerWelcome, hello: m.WorkerHello, *, strict: bool = False) -> None:
        self.session_id = welcome.session_id
        self.instance_id = welcome.body.instance_id
        self.epoch = welcome.body.epoch
        self.strict = strict
        self.concurrency_keys = hello.concurrency_keys
        self._kinds: dict[str, frozenset[str] | None] = {
            s.queue: (frozenset(s.kinds) if s.kinds is not None else None) for s in hello.subscriptions
        }
        self._pending: dict[str, Request] = {}
        self._counter = 0
        self._session_part = f.session_part(self.session_id)
        self._epoch_text = str(self.epoch)

    # -- requests ---------------------------------------------------------------
    def request(self, cls: type, **fields: Any) -> m.ClientMessage:
        """Build a request with a fresh id and record it as pending."""
        self._counter += 1
        message = cls(id=f"{_PREFIX[cls]}{self._counter}", session_id=self.session_id, **fields)
        self._pending[message.id] = message
        return message

    def lease_request(self, cls: type, lease: f.LeaseFrames, revision: int, tail: bytes) -> tuple[str, bytes]:
        """A lease command's id and frame, from the lease's pre-encoded fields; recorded as pending."""
        self._counter += 1
        command, _, prefix = f.COMMANDS[cls]
        request_id = f"{prefix}{self._counter}"
        self._pending[request_id] = f.LeaseRequest(request_id, command, lease, revision)
        return request_id, f.command_frame(cls, request_id, self._session_part, lease, revision, tail)

    def forget(self, request_id: str) -> None:
        """The frame was never sent: no answer will come."""
        self._pending.pop(request_id, None)

    def pending(self) -> list[Request]:
        return list(self._pending.values())

    # -- receiving --------------------------------------------------------------
    def receive(self, text: str | bytes) -> Event:
        data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
        if data.startswith(f.ACK_START) and len(data) <= MAX_FRAME_BYTES:
            answered = f.decode_command_ack(data, self._pending, self.session_id, self.epoch, self._epoch_text)
            if answered is not None:
                request, body = answered
                del self._pending[request.id]
                return Answered(request, body)
        elif data.startswith(f.OFFER_START) and len(data) <= MAX_FRAME_BYTES:
            offer = f.decode_offer(data, self.session_id, self.epoch, self._epoch_text, self._kinds,
                                   self.concurrency_keys)
            if offer is not None:
                return self._offered(offer)
        message = try_decode_server(data, self._pending_type) if len(data) <= MAX_FRAME_BYTES else None
        if message is not None:
            reply_to = getattr(message, "reply_to", None)
            request = self._pending.get(reply_to) if reply_to is not None else None
        else:
            try:
                raw = scan_frame(text)
            except ProtocolError as exc:
                return Broken(f"unreadable frame from the server: {exc}")
            header = raw.header
            request = self._pending.get(header.reply_to) if header.reply_to is not None else None
            ack_for = request.TYPE if request is not None and header.type == "ack" else None
            try:
                message = decode_server(raw, ack_for=ack_for, strict=self.strict)
            except ProtocolError as exc:
                if request is not None:
                    self._pending.pop(request.id, None)
                    return Broken(f"invalid answer to {request.TYPE} {request.id}: {exc.message}", request)
                return Dropped(f"invalid {header.type or 'frame'} ignored: {exc.message}",
                               offer=header.type == "task.assign")
        if message.session_id is not None and message.session_id != self.session_id:
            if request is not None:
                self._pending.pop(request.id, None)
                return Broken(f"answer to {request.id} names session {message.session_id}", request)
            return Dropped(f"{message.TYPE} for another session ignored", offer=isinstance(message, m.TaskAssign))
        if isinstance(message, m.Ack):
            if request is None:
                return Dropped(f"ack to {message.reply_to!r}, which is not pending")
            del self._pending[request.id]
            problem = self._check_ack(request, message.body)
            return Broken(problem, request) if problem else Answered(request, message.body)
        if isinstance(message, m.Error):
            if request is not None:
                del self._pending[request.id]
                return Refused(request, message)
            return Fatal(message) if message.fatal else Dropped(f"error {message.code}: {message.message}")
        if isinstance(message, m.TaskAssign):
            return self._offered(message)
        if isinstance(message, m.TaskCancel):
            return CancelPushed(message)
        return Dropped(f"unexpected {message.TYPE} inside a session")

    def _pending_type(self, reply_to: str) -> str | None:
        request = self._pending.get(reply_to)
        return request.TYPE if request is not None else None

    # -- checks the schema cannot make -----------------------------------------------
    def _offered(self, msg: m.TaskAssign) -> Offered | Dropped:
        """An offer, by either reading, held to this session's rules (the one-pass reading asks them too)."""
        problem = self._check_offer(msg)
        return Dropped(f"task.assign of {msg.task.task_id} rejected: {problem}", offer=True) if problem else Offered(msg)

    def _check_offer(self, msg: m.TaskAssign) -> str | None:
        task, lease = msg.task, msg.lease
        if task.queue not in self._kinds:
            return f"queue {task.queue!r} is not subscribed"
        kinds = self._kinds[task.queue]
        if kinds is not None and task.kind not in kinds:
            return f"kind {task.kind!r} of queue {task.queue!r} is not subscribed"
        if task.concurrency_key is not None and not self.concurrency_keys:
            return "a keyed task, but this session did not declare concurrency_keys"
        if lease.epoch != self.epoch:
            return f"lease epoch {lease.epoch} is not this session's epoch {self.epoch}"
        return None

    def _check_ack(self, request: Request, body: m.AckBody) -> str | None:
        what = f"ack to {request.TYPE} {request.id}"
        if isinstance(request, m.WorkerCapacity):
            assert isinstance(body, m.Welcome)
            if body.instance_id != self.instance_id or body.epoch != self.epoch:
                return f"{what} describes another instance"
            return None
        if isinstance(request, m.WorkerResume):
            assert isinstance(body, m.Lease)
            if (body.lease_id, body.task_id) != (request.lease_id, request.task_id):
                return f"{what} carries lease {body.lease_id} of {body.task_id}"
            if body.epoch != self.epoch:
                return f"{what}: a resumed lease carries the session's epoch {self.epoch}, not {body.epoch}"
            return None
        assert isinstance(body, m.CommandResult)
        receipt, lease = body.receipt, body.lease
        if receipt.command != request.TYPE:
            return f"{what} carries a receipt of {receipt.command}"
        if (receipt.task_id, receipt.lease_id, receipt.revision) != (request.task_id, request.lease_id,
                                                                      request.revision):
            return f"{what}: the receipt names another lease or revision"
        if lease is not None:
            if (lease.lease_id, lease.task_id) != (request.lease_id, request.task_id):
                return f"{what} carries another lease"
            if lease.revision <= request.revision:
                return f"{what}: the lease revision did not advance"
            if lease.epoch != self.epoch:
                return f"{what}: lease epoch {lease.epoch} is not this session's"
            if request.TYPE == "task.finish" and not receipt.duplicate:
                return f"{what} still carries a lease after the finish"
        elif request.TYPE != "task.finish" and not receipt.duplicate:
            return f"{what} grants no lease"
        return None


_PREFIX: dict[type, str] = {
    m.WorkerCapacity: "c", m.WorkerResume: "r", m.TaskStart: "s", m.TaskRenew: "n", m.TaskFinish: "f",
}

__all__ = [
    "Answered", "Broken", "CancelPushed", "ClientProtocol", "Dropped", "Event", "Fatal", "Offered", "Refused", "Request",
    "read_welcome", "refusal",
]
