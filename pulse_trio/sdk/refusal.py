"""Whose fault a refusal is: the token's, one URL's, or nobody's for good.

The one place that decides what a refusal does to ``Worker.run``
(docs/worker.md §11.1):

* ``TOKEN``: every instance of the service refuses the token alike, so
  ``run()`` ends at once with ``WorkerRefused``, whatever URLs are left;
* ``URL``: this URL's own (not a worker endpoint, a redirect, a
  certificate, another protocol version behind it): it is marked refused and
  the next URL tried; ``run()`` ends once every URL has refused since a
  session last opened;
* ``TRANSIENT``: a reconnect may fix it (a 5xx, a 429, a hello answered
  ``internal``): back off and try again, ending nothing.

The transport asks it of a refused handshake's HTTP status, the protocol of
a refused hello's error code; either raises ``WorkerRefused`` unless the
answer is transient, and the worker and the CLI ask :func:`of_refused` which
of the other two it was.
"""

from __future__ import annotations

import enum
from typing import Final

from pulse_trio.contract import errors as e
from pulse_trio.sdk.errors import WorkerRefused


class Fault(enum.Enum):
    """Whose a refusal is, which is what decides whether ``run()`` ends, passes a URL over, or backs off."""

    TOKEN = "token"
    URL = "url"
    TRANSIENT = "transient"


#: HTTP statuses of a redirect: the URL's own, as the SDK follows none (each reconnect would be sent the same way).
REDIRECTS: Final = range(300, 400)
#: HTTP statuses of a refused handshake that refuse the token (bad, revoked, not a worker's).
TOKEN_STATUSES: Final = frozenset({401})
#: HTTP statuses of a refused handshake that are the URL's own besides the redirects: no
#: subprotocol (400, 426), not a worker endpoint (403, 404).
URL_STATUSES: Final = frozenset({400, 403, 404, 426})
#: Error codes of a refused hello that refuse the token: a subscribed queue outside it.
TOKEN_CODES: Final = frozenset({e.PERMISSION_DENIED})
#: Error codes of a refused hello that are the URL's own: the instance behind it speaks another
#: protocol version, or reads this SDK's hello as invalid (an instance of another release).
URL_CODES: Final = frozenset({e.UNSUPPORTED_VERSION, e.INVALID_FRAME})


def of_status(status: int) -> Fault:
    """Whose fault a handshake answered with HTTP ``status`` instead of the upgrade is."""
    if status in TOKEN_STATUSES:
        return Fault.TOKEN
    if status in URL_STATUSES or status in REDIRECTS:
        return Fault.URL
    return Fault.TRANSIENT


def of_code(code: str) -> Fault:
    """Whose fault a hello answered with error ``code`` is."""
    if code in TOKEN_CODES:
        return Fault.TOKEN
    if code in URL_CODES:
        return Fault.URL
    return Fault.TRANSIENT


def of_refused(refused: WorkerRefused) -> Fault:
    """Whose fault a ``WorkerRefused`` is, by its ``status`` or ``code``: the token's, else its URL's.

    Never transient: what a reconnect may fix is raised as ``ConnectionLost``
    instead. A refusal with neither (a certificate, an upgrade to another
    subprotocol) is the URL's.
    """
    status, code = refused.status, refused.code
    if (status is not None and of_status(status) is Fault.TOKEN) or (code is not None and of_code(code) is Fault.TOKEN):
        return Fault.TOKEN
    return Fault.URL
