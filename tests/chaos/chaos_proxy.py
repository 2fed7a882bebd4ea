"""A real TCP proxy between workers and servers that drops connections at random.

Workers connect to ``DroppingProxy.port``; every accepted connection is
relayed to one of the upstream servers (picked at random, so a reconnect
may land on another instance). While dropping is on, at random moments
(a seeded ``random.Random``) one live connection is ended abruptly, in
one of these ways (the first drops use each once, in a random order):

``rst``         RST to both sides (``SO_LINGER`` 0, then close)
``fin``         a plain close of both sides (FIN)
``rst_worker``  RST to the worker, FIN to the server
``rst_server``  FIN to the worker, RST to the server
``stall``       stop relaying for a while (longer than a lease ttl), then RST
                both: the worker loses its leases before it sees the drop
``orphan``      RST to the worker; the server side stays open, silent, for a
                while and is then closed: the server still believes in the
                old session while the worker resumes elsewhere
``cut_reply``   wait for the worker's next bytes (usually a command), pass
                them on, relay nothing back, and RST both a few milliseconds
                later: the command may have committed while its ack is lost
``cut_worker``  wait for the worker's next bytes, pass on only their first
                part (a frame cut in the middle), and RST both at once
``cut_server``  the same for the server's next bytes (an offer or an ack cut
                in the middle on its way to the worker)

One thread, one selector, non-blocking sockets: the drop is done by the
thread that relays, so no socket is ever closed under another thread.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import random
import selectors
import socket
import struct
import threading
import time

MODES = ("rst", "fin", "rst_worker", "rst_server", "stall", "orphan", "cut_reply", "cut_worker", "cut_server")
_CHUNK = 65536
_HIGH_WATER = 1 << 20  # stop reading a side while the other side's backlog is above this


def _now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def _reset(sock: socket.socket) -> None:
    """Close with an RST: linger on, timeout 0."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def _close(sock: socket.socket) -> None:
    """A plain close (FIN), after telling the peer we are done both ways."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


@dataclasses.dataclass(eq=False)
class _Pair:
    worker: socket.socket
    server: socket.socket
    upstream: tuple[str, int]
    opened_at: float
    # bytes waiting to be written to each side
    to_worker: bytearray = dataclasses.field(default_factory=bytearray)
    to_server: bytearray = dataclasses.field(default_factory=bytearray)
    worker_eof: bool = False  # the worker sent FIN (nothing more to read from it)
    server_eof: bool = False
    worker_shut: bool = False  # we sent FIN to the worker after relaying everything
    server_shut: bool = False
    frozen_until: float | None = None  # stall: relaying stopped until then, then RST
    cut_armed: bool = False  # cut_reply: freeze right after the worker's next bytes are passed on
    cut_from: str | None = None  # cut_worker / cut_server: that side's next bytes are passed on in part, then RST
    closed: bool = False

    def peer_buffer(self, sock: socket.socket) -> bytearray:
        return self.to_server if sock is self.worker else self.to_worker

    def own_buffer(self, sock: socket.socket) -> bytearray:
        return self.to_worker if sock is self.worker else self.to_server


class DroppingProxy:
    """``with DroppingProxy(upstreams, seed) as proxy: proxy.dropping = True ...``."""

    def __init__(self, upstreams: list[tuple[str, int]], seed: int, *, interval: tuple[float, float] = (0.05, 0.6),
                 modes: tuple[str, ...] = MODES, stall: tuple[float, float] = (1.3, 2.5),
                 orphan: tuple[float, float] = (1.0, 4.0)) -> None:
        assert upstreams and all(m in MODES for m in modes)
        self.upstreams = list(upstreams)
        self.rng = random.Random(seed)
        self.interval, self.modes, self.stall, self.orphan = interval, modes, stall, orphan
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.dropping = False  # set from the test thread; read by the relay thread
        self.stats: collections.Counter[str] = collections.Counter()
        self.drops: list[tuple[float, str, float]] = []  # (when, mode, connection age)
        self.errors: list[str] = []
        self._sel = selectors.DefaultSelector()
        self._pairs: set[_Pair] = set()
        self._orphans: list[tuple[float, socket.socket]] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._stop = False
        self._next_drop: float | None = None
        self._deck = self.rng.sample(self.modes, len(self.modes))
        self._thread = threading.Thread(target=self._run, name="dropping-proxy", daemon=True)

    # -- control (test thread) -------------------------------------------------------
    def __enter__(self) -> DroppingProxy:
        self._sel.register(self.listener, selectors.EVENT_READ, None)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._stop:
            return
        self._stop = True
        # The wake-up pair is this thread's to close: the relay thread may see _stop and end at any
        # moment from the line above on, so it never closes either end under us.
        self._wake_w.send(b"x")
        self._thread.join(timeout=10)
        assert not self._thread.is_alive(), "the proxy thread did not stop"  # (so it cannot use the pair below)
        self._wake_w.close()
        self._wake_r.close()

    @property
    def dropped(self) -> int:
        return sum(self.stats[m] for m in MODES)

    @property
    def live(self) -> int:
        return len(self._pairs)

    # -- the relay thread ------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop:
                now = _now()
                deadlines = [now + 0.05]
                if self.dropping:
                    if self._next_drop is None:
                        self._next_drop = now + self.rng.uniform(*self.interval)
                    deadlines.append(self._next_drop)
                else:
                    self._next_drop = None
                deadlines += [p.frozen_until for p in self._pairs if p.frozen_until is not None]
                deadlines += [until for until, _ in self._orphans]
                for key, mask in self._sel.select(max(0.0, min(deadlines) - now)):
                    if key.fileobj is self.listener:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._wake_r.recv(64)
                    else:
                        self._ready(key.data, key.fileobj, mask)
                self._timers(_now())
        except Exception as exc:  # pragma: no cover - reported to the test, which fails on it
            self.errors.append(repr(exc))
            raise
        finally:
            for pair in list(self._pairs):
                self._end(pair, _close, _close)
            for _, sock in self._orphans:
                sock.close()
            self._orphans.clear()
            self._sel.close()
            self.listener.close()

    def _timers(self, now: float) -> None:
        if self.dropping and self._next_drop is not None and now >= self._next_drop:
            self._next_drop = now + self.rng.uniform(*self.interval)
            self._drop_one(now)
        for pair in [p for p in self._pairs if p.frozen_until is not None and p.frozen_until <= now]:
            self._end(pair, _reset, _reset)
        due = [s for until, s in self._orphans if until <= now]
        self._orphans = [(u, s) for u, s in self._orphans if u > now]
        for sock in due:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                worker, _ = self.listener.accept()
            except BlockingIOError:
                return
            upstream = self.rng.choice(self.upstreams)
            try:
                server = socket.create_connection(upstream, timeout=2)
            except OSError as exc:
                self.stats["upstream_refused"] += 1
                self.errors.append(f"connect {upstream}: {exc}")
                _reset(worker)
                continue
            for sock in (worker, server):
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = _Pair(worker, server, upstream, _now())
            self._pairs.add(pair)
            self.stats["accepted"] += 1
            self._sel.register(worker, selectors.EVENT_READ, pair)
            self._sel.register(server, selectors.EVENT_READ, pair)

    def _ready(self, pair: _Pair, sock: socket.socket, mask: int) -> None:
        if pair.closed or pair.frozen_until is not None:
            return
        other = pair.server if sock is pair.worker else pair.worker
        try:
            if mask & selectors.EVENT_WRITE:
                buf = pair.own_buffer(sock)
                sent = sock.send(buf)
                del buf[:sent]
            if mask & selectors.EVENT_READ:
                data = sock.recv(_CHUNK)
                if data and pair.cut_from == ("worker" if sock is pair.worker else "server"):
                    self._cut_mid_frame(pair, other, data)
                    return
                if data and pair.cut_armed and sock is pair.worker:
                    pair.to_server.extend(data)
                    while pair.to_server:  # localhost: the kernel takes a command at once
                        del pair.to_server[:pair.server.send(pair.to_server)]
                    pair.frozen_until = _now() + self.rng.uniform(0.0, 0.03)
                    self._unregister(pair)
                    return
                if data:
                    pair.peer_buffer(sock).extend(data)
                elif sock is pair.worker:
                    pair.worker_eof = True
                else:
                    pair.server_eof = True
            # relay eagerly: most writes to localhost succeed at once
            for target in (other, sock):
                buf = pair.own_buffer(target)
                if buf:
                    try:
                        del buf[:target.send(buf)]
                    except BlockingIOError:
                        pass
            # a FIN is passed on once everything before it was relayed
            if pair.worker_eof and not pair.to_server and not pair.server_shut:
                pair.server.shutdown(socket.SHUT_WR)
                pair.server_shut = True
            if pair.server_eof and not pair.to_worker and not pair.worker_shut:
                pair.worker.shutdown(socket.SHUT_WR)
                pair.worker_shut = True
        except (ConnectionError, OSError) as exc:
            if isinstance(exc, BlockingIOError):
                pass
            else:
                if getattr(exc, "errno", None) not in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN, None):
                    self.errors.append(f"relay: {exc!r}")
                self.stats["ended_by_peer_error"] += 1
                self._end(pair, _close, _close)
                return
        if pair.worker_shut and pair.server_shut:
            self.stats["ended_cleanly"] += 1
            self._end(pair, _close, _close)
            return
        self._interest(pair)

    def _cut_mid_frame(self, pair: _Pair, other: socket.socket, data: bytes) -> None:
        """Relay what was waiting and the first part of ``data`` (never all of it), then RST both sides."""
        buf = pair.own_buffer(other)
        buf.extend(data[:max(1, len(data) // 2)] if len(data) > 1 else b"")
        try:
            while buf:  # localhost: the kernel takes the part at once
                del buf[:other.send(buf)]
        except OSError:
            pass
        self.stats["cut_part_relayed"] += 1
        self._end(pair, _reset, _reset)

    def _interest(self, pair: _Pair) -> None:
        for sock, eof in ((pair.worker, pair.worker_eof), (pair.server, pair.server_eof)):
            events = 0
            if not eof and len(pair.peer_buffer(sock)) < _HIGH_WATER:
                events |= selectors.EVENT_READ
            if pair.own_buffer(sock):
                events |= selectors.EVENT_WRITE
            registered = self._registered(sock)
            if events and registered:
                self._sel.modify(sock, events, pair)
            elif events:
                self._sel.register(sock, events, pair)
            elif registered:
                self._sel.unregister(sock)

    def _registered(self, sock: socket.socket) -> bool:
        try:
            self._sel.get_key(sock)
            return True
        except KeyError:
            return False

    def _unregister(self, pair: _Pair) -> None:
        for sock in (pair.worker, pair.server):
            if self._registered(sock):
                self._sel.unregister(sock)

    def _end(self, pair: _Pair, to_worker, to_server) -> None:
        if pair.closed:
            return
        pair.closed = True
        self._unregister(pair)
        self._pairs.discard(pair)
        if to_worker is not None:
            to_worker(pair.worker)
        if to_server is not None:
            to_server(pair.server)

    def _drop_one(self, now: float) -> None:
        candidates = sorted((p for p in self._pairs
                             if p.frozen_until is None and not p.cut_armed and p.cut_from is None),
                            key=lambda p: p.opened_at)
        if not candidates:
            self.stats["no_connection_to_drop"] += 1
            return
        pair = self.rng.choice(candidates)
        # the first drops deal every mode once (in a random order), so each run has each kind
        mode = self._deck.pop() if self._deck else self.rng.choice(self.modes)
        self.stats[mode] += 1
        self.drops.append((now, mode, now - pair.opened_at))
        if mode == "rst":
            self._end(pair, _reset, _reset)
        elif mode == "fin":
            self._end(pair, _close, _close)
        elif mode == "rst_worker":
            self._end(pair, _reset, _close)
        elif mode == "rst_server":
            self._end(pair, _close, _reset)
        elif mode == "stall":
            pair.frozen_until = now + self.rng.uniform(*self.stall)
            self._unregister(pair)
        elif mode == "cut_reply":
            pair.cut_armed = True
        elif mode in ("cut_worker", "cut_server"):
            pair.cut_from = mode.removeprefix("cut_")
        elif mode == "orphan":
            self._end(pair, _reset, None)
            self._orphans.append((now + self.rng.uniform(*self.orphan), pair.server))
