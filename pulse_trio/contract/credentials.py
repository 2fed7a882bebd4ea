"""A bearer token as a client holds it, checked once when the client is made.

The worker SDK and the producer clients both send it in an ``Authorization``
header. A token no header can carry fails every request the same way, and
the HTTP library's error would quote the header, secret and all: one check
here refuses it first, in words that never show it.
"""

from __future__ import annotations


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
