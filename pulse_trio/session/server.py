"""The server side of one ``pulse.worker.v1`` connection, without any I/O.

Theory of operation (after h11): the transport hands every received text
message to :meth:`ServerSession.receive` and gets back exactly one event:

* :class:`Request` — a well-formed request of this session that the server
  must carry out (through the store) and then answer with :meth:`ack`,
  :meth:`welcome` or :meth:`refuse`;
* :class:`Reject` — an error frame to send now (the protocol itself refuses
  the frame); if ``close_code`` is set the transport closes after sending;
* :class:`Close` — close without an error frame (an oversized frame, or a
  frame that arrives while the session is closing).

The layers of the protocol's parsing pipeline (docs/protocol.md) run in
order and the first failure wins: strict scanning and version, hello-first,
session id, result checks, schema and grammar, duplicate ids. A well-formed
frame takes the compiled fast path (``contract.fast_client``); any other is
judged by the reference decoder.

The connection state is the ``session`` statechart. Triggers fire only
after the store committed what they stand for. Answers and pushes never
raise for a state: each returns the frame to send, or None when the session
has nothing to send (it is closing, or the chart does not allow the push),
so the caller tests a value. A late answer (the store finished after a
fatal error, say) is accepted and dropped, as h11 drops data after an
error. Nothing outside this module ever sees a ``transitions`` exception.

Guardless self-loops (``command``, ``dispatch``, ``notify_cancel``) change
nothing; they are checked against the chart's table instead of being fired
through the machine, which would cost as much as a real transition on the
hottest path.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from transitions import MachineError

from pulse_trio.charts import machine_chart
from pulse_trio.contract import errors as e
from pulse_trio.contract import messages as m
from pulse_trio.contract.codec import decode_client, scan_frame
from pulse_trio.contract.encoder import encode_bytes
from pulse_trio.contract.errors import FrameTooLarge, ProtocolError
from pulse_trio.contract.fast_client import try_decode_client
from pulse_trio.contract.frozen import frozen
from pulse_trio.contract.limits import MAX_ERROR_MESSAGE_CHARS, MAX_FRAME_BYTES, MAX_INVALID_FRAMES
from pulse_trio.contract.trusted import trusted

_SESSION_CHART = machine_chart("session")
_QUIET = _SESSION_CHART.unguarded_self_loops()
_ENDING = ("closing", "closed")
#: The two pushes of every task, built unchecked: their frame ids are this session's own, their
#: session id is the session's, ``reply_to`` was checked when its request was decoded, and the
#: bodies come from ``server.to_wire`` (trusted for the same reasons).
_TRUSTED_ACK = trusted(m.Ack)
_TRUSTED_ASSIGN = trusted(m.TaskAssign)


@frozen
class Request:
    """A valid request to carry out; answer it exactly once."""

    message: m.ClientMessage

    @property
    def type(self) -> str:
        return self.message.TYPE


@frozen
class Reject:
    """An error frame to send; then close with ``close_code`` if it is set."""

    frame: bytes
    code: str
    close_code: int | None


@frozen
class Close:
    """Close the connection with ``code`` and no error frame."""

    code: int
    reason: str


Event = Request | Reject | Close


class _Model:
    """The object the session chart moves; it holds nothing but the state."""

    __slots__ = ("state", "drain")
    state: str

    def __init__(self) -> None:
        self.drain = False

    def drain_requested(self, *args: object, **kwargs: object) -> bool:
        return self.drain


class ServerSession:
    """Protocol state of one connection; the server owns the I/O around it."""

    def __init__(self, session_id: str, *, new_frame_id: Callable[[], str] | None = None) -> None:
        self.session_id = session_id
        self._model = _Model()
        _SESSION_CHART.attach(self._model)
        self._attached = True
        self._pending: dict[str, str] = {}
        self._invalid_frames = 0
        self._counter = 0
        self._new_frame_id = new_frame_id or self._next_frame_id
        self._registered = False
        #: Answers accepted after the session began closing, dropped unsent.
        self.dropped_answers = 0

    # -- state -----------------------------------------------------------
    @property
    def state(self) -> str:
        return self._model.state

    @property
    def registered(self) -> bool:
        """Whether the hello was answered: from then on frames carry session_id."""
        return self._registered

    @property
    def ending(self) -> bool:
        """Closing or closed: nothing more is sent but the close itself."""
        return self._model.state in _ENDING

    def pending(self) -> dict[str, str]:
        """Request ids awaiting an answer, with their types (a copy)."""
        return dict(self._pending)

    def release(self) -> None:
        """Close the session's state (peer_closed, finalize); safe to call more than once."""
        if not self._attached:
            return
        if self.state not in _ENDING:
            self._fire("peer_closed")
        if self.state == "closing":
            self._fire("finalize")
        self._attached = False

    # -- receiving -------------------------------------------------------
    def receive(self, text: str | bytes) -> Event:
        """Classify one received text message (see the module docstring)."""
        if self.ending:
            return Close(1000, "session is closing")
        data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
        if len(data) <= MAX_FRAME_BYTES:
            message = try_decode_client(data)
            if message is not None:
                return self._checked(message)
        try:
            raw = scan_frame(text)
        except FrameTooLarge as exc:
            self._fire("fail")
            return Close(exc.close_code, "frame too large")
        except ProtocolError as exc:
            return self._reject(exc)
        header = raw.header
        refused = self._envelope(header.type, header.id, header.session_id)
        if refused is not None:
            return refused
        try:
            message = decode_client(raw)
        except ProtocolError as exc:
            if exc.code == e.INVALID_FRAME:
                self._invalid_frames += 1
                if self._invalid_frames > MAX_INVALID_FRAMES:
                    exc = ProtocolError(
                        e.INVALID_FRAME, f"more than {MAX_INVALID_FRAMES} invalid frames: {exc.message}",
                        fatal=True, reply_to=exc.reply_to)
            return self._reject(exc)
        return self._pend(message)

    def _checked(self, message: m.ClientMessage) -> Event:
        """A frame the fast path decoded: the same envelope checks, then the pending table."""
        refused = self._envelope(message.TYPE, message.id, getattr(message, "session_id", None))
        return self._pend(message) if refused is None else refused

    def _envelope(self, frame_type: str | None, frame_id: str | None, session_id: str | None) -> Reject | None:
        """Hello first, one hello, this connection's session id (docs/protocol.md §4.8), for either decoder.

        ``frame_id`` is the id to answer (None when it was unreadable); None means the checks pass.
        """
        if self.state == "awaiting_hello":
            if frame_type != "worker.hello":
                return self._reject(ProtocolError(
                    e.HELLO_REQUIRED, "the first frame must be worker.hello", reply_to=frame_id))
            if self._pending:
                return self._hello_pending(frame_id)
        elif frame_type == "worker.hello":
            return self._reject(ProtocolError(
                e.INVALID_TRANSITION, f"worker.hello in state {self.state}: this session is registered",
                reply_to=frame_id))
        elif session_id != self.session_id:
            what = "missing" if session_id is None else "not this connection's session"
            return self._reject(ProtocolError(e.SESSION_MISMATCH, f"session_id is {what}", reply_to=frame_id))
        return None

    def _hello_pending(self, reply_to: str | None) -> Reject:
        """A hello while another is being registered: one session, one welcome."""
        return self._reject(ProtocolError(
            e.INVALID_TRANSITION, "worker.hello while another worker.hello is pending", reply_to=reply_to))

    def _pend(self, message: m.ClientMessage) -> Event:
        if message.id in self._pending:
            return self._reject(ProtocolError(
                e.DUPLICATE_MESSAGE_ID, f"id {message.id!r} is still pending", reply_to=message.id))
        self._pending[message.id] = message.TYPE
        return Request(message)

    # -- answering -------------------------------------------------------
    def welcome(self, reply_to: str, body: m.Welcome) -> bytes | None:
        """Answer the hello after instance.register committed; None if the session is closing."""
        if not self._answer(reply_to, "worker.hello"):
            return None
        self._fire("hello")
        self._registered = True
        return encode_bytes(m.WorkerWelcome(id=self._new_frame_id(), session_id=self.session_id,
                                            reply_to=reply_to, body=body))

    def capacity_applied(self, drain: bool) -> None:
        """Record a capacity frame the store committed (stale ones are not applied)."""
        self._model.drain = drain
        if not self.ending:
            self._fire("capacity")

    def operator_drained(self) -> None:
        """An operator's drain of this session committed (seen here or through another instance)."""
        self._model.drain = True
        if not self.ending:
            self._fire("operator_drain")

    @property
    def draining(self) -> bool:
        """The chart's draining state: nothing is offered to this session."""
        return self._model.state == "draining"

    def ack(self, reply_to: str, body: m.AckBody) -> bytes | None:
        """Answer a capacity, resume or lease command; None if the session is closing."""
        request_type = self._pending.get(reply_to)
        if request_type is not None:
            expected = m.ACK_BODY_FOR[request_type]
            if not isinstance(body, expected):  # a bug on this side, never the peer's doing
                raise e.InvalidMessage("body", f"an ack to {request_type} carries {expected.__name__}")
        if not self._answer(reply_to):
            return None
        if request_type != "worker.capacity" and (("command", self.state) not in _QUIET):
            return self._dropped()
        if type(body) is m.CommandResult:  # a lease command's: the hot path
            return encode_bytes(_TRUSTED_ACK(self._new_frame_id(), self.session_id, reply_to, body))
        return encode_bytes(m.Ack(id=self._new_frame_id(), session_id=self.session_id, reply_to=reply_to,
                                  body=body))

    def refuse(self, reply_to: str, code: str, message: str, *, fatal: bool | None = None,
               retry_after_ms: int | None = None) -> Reject | None:
        """Answer a pending request with an error (a store refusal, say); None if closing."""
        if not self._answer(reply_to):
            return None
        return self._reject(ProtocolError(code, message, fatal=fatal, reply_to=reply_to),
                            retry_after_ms=retry_after_ms)

    # -- pushes ----------------------------------------------------------
    def assign(self, task: m.AssignedTask, lease: m.Lease) -> bytes | None:
        """A task.assign push (the dispatcher committed the offer); None while draining or closing."""
        if ("dispatch", self.state) not in _QUIET:
            return None
        return encode_bytes(_TRUSTED_ASSIGN(self._new_frame_id(), self.session_id, task, lease))

    def cancel(self, task_id: str, lease_id: str, requested_at: datetime, grace_expires_at: datetime,
               reason: str | None) -> bytes | None:
        """A task.cancel push for a lease this session holds; None when the session cannot take it."""
        if ("notify_cancel", self.state) not in _QUIET:
            return None
        return encode_bytes(m.TaskCancel(id=self._new_frame_id(), session_id=self.session_id, task_id=task_id,
                                         lease_id=lease_id, cancel_requested_at=requested_at,
                                         grace_expires_at=grace_expires_at, reason=reason))

    def fail(self, code: str, message: str) -> Reject | None:
        """An unsolicited fatal error (hello timeout, missing pong); None if already closing."""
        if self.ending:
            return None
        return self._reject(ProtocolError(code, message, fatal=True))

    def shutdown(self) -> Reject | None:
        """The instance is stopping: server_shutting_down, no reply_to, then close; None if closing."""
        if self.ending:
            return None
        frame = self._error_frame(ProtocolError(e.SERVER_SHUTTING_DOWN, "this instance is shutting down; "
                                                "reconnect and resume your leases"))
        self._fire("shutdown")
        return Reject(frame, e.SERVER_SHUTTING_DOWN, e.CLOSE_GOING_AWAY)

    # -- internals -------------------------------------------------------
    def _answer(self, reply_to: str, expected_type: str | None = None) -> bool:
        """Pop a pending request; False when there is nothing to send for it."""
        request_type = self._pending.pop(reply_to, None)
        if request_type is None or (expected_type and request_type != expected_type):
            raise e.InvalidMessage("reply_to", f"no pending {expected_type or 'request'} with id {reply_to!r}")
        if self.ending:
            self._dropped()
            return False
        return True

    def _dropped(self) -> None:
        self.dropped_answers += 1

    def _reject(self, exc: ProtocolError, *, retry_after_ms: int | None = None) -> Reject:
        frame = self._error_frame(exc, retry_after_ms=retry_after_ms)
        if exc.fatal:
            self._fire("fail")
        return Reject(frame, exc.code, exc.close_code)

    def _error_frame(self, exc: ProtocolError, *, retry_after_ms: int | None = None) -> bytes:
        return encode_bytes(m.Error(
            id=self._new_frame_id(), code=exc.code, message=exc.message[:MAX_ERROR_MESSAGE_CHARS], fatal=exc.fatal,
            retry_after_ms=retry_after_ms, session_id=self.session_id if self.registered else None,
            reply_to=exc.reply_to,
        ))

    def _fire(self, trigger: str) -> bool:
        """Fire a state-changing trigger; False (and no change) where the chart does not allow it."""
        try:
            return bool(_SESSION_CHART.fire(self._model, trigger))
        except MachineError:
            return False

    def _next_frame_id(self) -> str:
        self._counter += 1
        return f"s-{self._counter}"


__all__ = ["Close", "Event", "Reject", "Request", "ServerSession"]
