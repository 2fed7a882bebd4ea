"""A bearer token as a client holds it, checked once when the client is made.

The worker SDK and the producer clients both send it in an ``Authorization``
header. A token no header can carry fails every request the same way, and
the HTTP library's error would quote the header, secret and all: one check
here refuses it first, in words that never show it.
"""

from __future__ import annotations

import logging

#: The header that carries the token, as ``websockets``' codec logs it (any case).
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization"})


def check_token(token: str, role: str) -> None:
    """ValueError unless ``token`` is printable ASCII without blanks around it, as an HTTP header carries it.

    ``role`` names the token in the message (``worker``, say). The message
    never quotes the token: it is a secret, and a line on stderr ends up in
    logs. A token read from a file keeps its line end (a carriage return
    too, if the file was saved with CRLF).
    """
    if not token:
        raise ValueError(f"the {role} token is empty")
    if not (token.isascii() and token.isprintable()) or token != token.strip():
        raise ValueError(f"the {role} token is not printable ASCII without blanks around it "
                         "(a line end or a blank copied with it?)")


class HiddenCredentials(logging.Filter):
    """Hides the value of a credential header in the handshake lines ``websockets``' codec logs at DEBUG.

    The codec logs every header of the handshake (``> Authorization: Bearer
    ...`` on the client, ``< ...`` on the server) once its logger is enabled
    for DEBUG, as a test run's log capture (``--log-level=DEBUG``) or a
    debugging ``basicConfig`` does; the token would then be printed with a
    failed test's captured log, or kept in a log file. Added to the logger
    a codec is given.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 2 and str(args[0]).lower() in _CREDENTIAL_HEADERS:
            record.args = (args[0], "<hidden>")
        return True
