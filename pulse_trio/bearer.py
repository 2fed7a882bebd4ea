"""The ``Authorization: Bearer <token>`` header, parsed one way for every endpoint.

The worker handshake and the HTTP API both take their token from it; one
parser means a header one of them accepts is never refused by the other.
"""

from __future__ import annotations


def parse_bearer(value: str) -> str | None:
    """The token of an ``Authorization`` value (scheme in any case); None for another scheme or no token."""
    scheme, _, credentials = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return credentials.strip() or None
