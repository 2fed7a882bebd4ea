"""The worker token check of the opening handshake, shared by connections that present the same token at once.

In a reconnect storm thousands of connections arrive within seconds, most
of them with one of a handful of tokens, and each looked its token up in a
transaction of its own. Here a lookup that is under way is shared: a
connection whose token (by digest) is being looked up already waits for
that lookup's answer instead of starting another. Nothing is kept once the
lookup answers, so a revocation counts from the first lookup that starts
after it commits, as before; the lookup itself (``live_token``: the
digest's index, then a constant-time comparison) is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from pulse_trio.store.token.tokens import WORKER, live_token
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.tokens import TokenInfo, digest


class _Lookup:
    __slots__ = ("done", "answered", "info")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.answered = False
        self.info: TokenInfo | None = None


class TokenChecks:
    """``live_token`` for the handshakes of one endpoint, one lookup per token at a time."""

    def __init__(self, store: Store, roles: Sequence[str] = WORKER) -> None:
        self._store = store
        self._roles = tuple(roles)
        self._under_way: dict[bytes, _Lookup] = {}
        self.lookups = 0
        self.shared = 0

    async def check(self, token: str) -> TokenInfo | None:
        """The live token's record, or None (unknown, revoked, another role).

        Only an answer is shared: when the lookup under way fails or is
        cancelled (its connection went away), each waiter looks up itself.
        """
        key = digest(token)
        lookup = self._under_way.get(key)
        if lookup is not None:
            await lookup.done.wait()
            if lookup.answered:
                self.shared += 1
                return lookup.info
            if key in self._under_way:  # another waiter has started the next lookup: share that one
                return await self.check(token)
        lookup = self._under_way[key] = _Lookup()
        self.lookups += 1
        try:
            lookup.info = await self._store.run(live_token, token=token, roles=self._roles)
            lookup.answered = True
            return lookup.info
        finally:
            del self._under_way[key]
            lookup.done.set()
