"""How many connections the HTTP API holds, and a refused request ends its connection instead of holding it.

The bound (:func:`connection_limit`): the worker endpoint and the database
share the serve process's open-file limit with the HTTP API, so the API
takes a share of it, and the long-polls a share of that
(:func:`wait_limit`), so that waits never hold every connection a submit
or a health check needs.

Why the middleware exists: hypercorn hands a request's body to the application
through a small bounded queue. When a handler answers without reading the
body (a 413 judged from ``Content-Length``, a 401 before the body), the
unread chunks fill that queue, and hypercorn's end of the response waits
to add its "disconnected" message to the full queue: the answer is sent,
but the connection, the handler's task and its access-log line then wait
forever. This middleware watches what the application received. When the
answer starts before the body is complete, it says ``Connection: close``
(the client learns not to reuse the connection, and hypercorn closes it
after the answer), and while the answer's end is sent it reads and drops
the rest of the queue, for at most ``drain_timeout`` seconds, so that end
completes and the connection closes.
"""

from __future__ import annotations

import resource

import trio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The HTTP API holds at most this share of the open-file limit in connections; the rest stays for the
#: worker endpoint, the database and the logs.
HTTP_SHARE_OF_FILES = 0.5
#: The bound when the open-file limit is unlimited: it still bounds the memory connections hold.
UNLIMITED_FILES_CONNECTIONS = 100_000
#: Long-polls hold at most this share of the connections: the rest answer everything else.
WAITS_SHARE_OF_CONNECTIONS = 0.5


def connection_limit() -> int:
    """How many HTTP connections this process holds at once: a share of its open-file limit (``ulimit -n``)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return UNLIMITED_FILES_CONNECTIONS
    return max(1, int(soft * HTTP_SHARE_OF_FILES))


def wait_limit() -> int:
    """How many outcome long-polls this process holds at once (beyond: 503 ``too_many_waits``)."""
    return max(1, int(connection_limit() * WAITS_SHARE_OF_CONNECTIONS))


def _declares_body(scope: Scope) -> bool:
    """A request that says a body follows (a length over 0, or chunked)."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
    return False


class EndRefusedConnections:
    """ASGI middleware: an answer given before the whole body arrived closes the connection."""

    def __init__(self, app: ASGIApp, drain_timeout: float) -> None:
        self.app = app
        self.drain_timeout = drain_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _declares_body(scope):
            await self.app(scope, receive, send)
            return
        body_done = False
        closing = False

        async def tracked_receive() -> Message:
            nonlocal body_done
            message = await receive()
            if message["type"] == "http.disconnect" or (
                    message["type"] == "http.request" and not message.get("more_body", False)):
                body_done = True
            return message

        async def drain() -> None:
            with trio.move_on_after(self.drain_timeout):
                while not body_done:
                    await tracked_receive()

        async with trio.open_nursery() as nursery:
            async def closing_send(message: Message) -> None:
                nonlocal closing
                if message["type"] == "http.response.start" and not body_done:
                    closing = True
                    message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
                elif (message["type"] == "http.response.body" and not message.get("more_body", False)
                      and closing and not body_done):
                    nursery.start_soon(drain)
                await send(message)

            await self.app(scope, tracked_receive, closing_send)
