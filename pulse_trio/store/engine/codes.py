"""Every code a transaction function can refuse with: the store's one door to the contract's error codes.

The wire codes (docs/protocol.md §4.8) are spelled by the contract layer;
this module is the only one in the store that imports them, so the store
and the protocol cannot drift apart in two places. The internal codes
never reach a worker: the producer and operator surfaces (CLI, HTTP)
answer them, or the function itself absorbs them.
"""

from __future__ import annotations

from typing import Final

from pulse_trio.cluster_settings import SETTING_CONFLICT  # settings that cannot go together
from pulse_trio.contract.errors import (
    CANCEL_NOT_REQUESTED, CONCURRENCY_KEYS_NOT_DECLARED, INVALID_TRANSITION, LEASE_EXPIRED, LEASE_NOT_FOUND,
    LEASE_NOT_OWNED, PERMISSION_DENIED, REVISION_CONFLICT, SERVER_SHUTTING_DOWN, TASK_CANCELLED,
)

# Producer / operator surfaces (CLI, HTTP), and guards the function itself absorbs.
TASK_NOT_FOUND: Final = "task_not_found"
SESSION_NOT_FOUND: Final = "session_not_found"
INSTANCE_NOT_FOUND: Final = "instance_not_found"
STALE_SEQUENCE: Final = "stale_sequence"
NODE_LOST: Final = "node_lost"  # a heartbeat after another instance declared this node lost

WIRE_CODES: Final = frozenset({
    LEASE_NOT_FOUND, LEASE_EXPIRED, LEASE_NOT_OWNED, REVISION_CONFLICT, INVALID_TRANSITION,
    TASK_CANCELLED, CANCEL_NOT_REQUESTED, CONCURRENCY_KEYS_NOT_DECLARED, PERMISSION_DENIED,
    SERVER_SHUTTING_DOWN,  # worker.hello on a node that is not ALIVE: reconnect (to another instance)
})
INTERNAL_CODES: Final = frozenset({TASK_NOT_FOUND, SESSION_NOT_FOUND, INSTANCE_NOT_FOUND, STALE_SEQUENCE,
                                   NODE_LOST, SETTING_CONFLICT})

__all__ = [
    "CANCEL_NOT_REQUESTED", "CONCURRENCY_KEYS_NOT_DECLARED", "INSTANCE_NOT_FOUND", "INTERNAL_CODES",
    "INVALID_TRANSITION", "LEASE_EXPIRED", "LEASE_NOT_FOUND", "LEASE_NOT_OWNED", "NODE_LOST", "PERMISSION_DENIED",
    "REVISION_CONFLICT", "SERVER_SHUTTING_DOWN", "SESSION_NOT_FOUND", "SETTING_CONFLICT", "STALE_SEQUENCE",
    "TASK_CANCELLED", "TASK_NOT_FOUND", "WIRE_CODES",
]
