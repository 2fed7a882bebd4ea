"""Resource ids and secrets, made outside the transaction that stores them.

Ids are ``<prefix>_<ULID>`` in upper-case Crockford base32
(docs/protocol.md §3). The ULID's time part is wall-clock milliseconds,
used so new primary keys land near each other in the index and so a list
by id is in creation order (a process's ids increase, within one
millisecond too); no decision ever reads it. Secrets are 32 random bytes as canonical unpadded
base64url (43 chars); the database keeps only their SHA-256 digest, and a
presented secret is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac

from pulse_trio.contract import grammar

PREFIXES = frozenset({"ses", "ins", "tsk", "lse"})


def new_id(prefix: str) -> str:
    """A fresh ``prefix_ULID``; the contract layer owns the id grammar and its generator."""
    if prefix not in PREFIXES:
        raise ValueError(f"unknown id prefix {prefix!r}")
    return grammar.new_id(prefix + "_")


def new_node_id() -> str:
    """A serve process's id (chart ``node``): ``nod_<ULID>``, never on the wire, so outside the contract's ids."""
    return "nod_" + grammar.new_ulid()


new_secret = grammar.new_secret


def secret_digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


def secret_matches(secret: str, digest: bytes | None) -> bool:
    """Constant-time check of a presented secret against a stored digest."""
    if digest is None:
        # Still hash, so an unknown id costs the same as a wrong secret.
        hmac.compare_digest(secret_digest(secret), b"\0" * 32)
        return False
    return hmac.compare_digest(secret_digest(secret), bytes(digest))
