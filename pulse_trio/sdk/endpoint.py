"""Where a worker connects, checked when the worker is made rather than at each connect.

A URL no connect can use would fail every connect the same way, and the
reconnect loop would try it forever. Its token is checked likewise, by
:func:`pulse_trio.contract.credentials.check_token`, which the producer
clients share.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from websockets.exceptions import InvalidURI
from websockets.uri import parse_uri

SCHEMES = ("ws", "wss")


def check_url(url: str) -> None:
    """ValueError naming ``url`` unless it is ws:// or wss:// with a host and, if it names one, a port 1..65535.

    User info (``user:password@``) is refused too: connecting would send it
    as a second Authorization header beside the token's, which the service
    refuses. The message masks it, password and all.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed "[" of an IPv6 address
        raise ValueError(f"{url!r} is not a URL: {exc}") from None
    if "@" in parts.netloc:
        shown = url.replace(parts.netloc, "***@" + parts.netloc.rpartition("@")[2], 1)
        raise ValueError(f"{shown!r} is not a worker URL: it carries user info (user:password@), and a worker "
                         "authenticates with its token alone")
    if parts.scheme not in SCHEMES:
        raise ValueError(f"{url!r} is not a worker URL: it must start with "
                         f"{' or '.join(f'{scheme}://' for scheme in SCHEMES)}")
    if not parts.hostname:
        raise ValueError(f"{url!r} is not a worker URL: it names no host")
    try:
        port = parts.port
    except ValueError:  # not a number, or above 65535
        port = 0
    if port == 0:  # websockets would quietly dial the scheme's default port instead
        raise ValueError(f"{url!r} is not a worker URL: its port is not a number 1..65535")
    try:
        parse_uri(url)  # what connecting parses: it refuses a fragment, say
    except InvalidURI as exc:
        raise ValueError(f"{url!r} is not a worker URL: {exc.msg}") from None

