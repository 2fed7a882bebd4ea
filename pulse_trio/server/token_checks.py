"""The worker token check of the opening handshake, shared by connections that present the same token at once.

In a reconnect storm thousands of connections arrive within seconds, most
of them with one of a handful of tokens, and each looked its token up in a
transaction of its own. Here a lookup is shared, but only by connections
that came before it started: a connection whose token (by digest) is being
looked up already waits for that lookup to end, then takes the answer of
the next one, which starts after it came. The lookup under way may have
read the token before a revoke that has committed since, and a revoke
refuses the token's next connection at once (docs/operations.md §1.4). A
lookup starts one scheduling step after its first caller, so connections
whose handshakes are read in the same step share it; nothing is kept once
it answers, and the lookup itself (``token_verdict``: the digest's index, then
a constant-time comparison) is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from pulse_trio.store.token.tokens import WORKER, token_verdict
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.tokens import TokenInfo, digest


class _Lookup:
    __slots__ = ("done", "answered", "info", "number")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.answered = False
        self.info: TokenInfo | str = ""
        #: Its place among the lookups started (0 until it starts): a caller takes only an answer started after it came.
        self.number = 0


class TokenChecks:
    """``token_verdict`` for the handshakes of one endpoint, one lookup per token at a time."""

    def __init__(self, store: Store, roles: Sequence[str] = WORKER) -> None:
        self._store = store
        self._roles = tuple(roles)
        self._under_way: dict[bytes, _Lookup] = {}
        self.lookups = 0
        self.shared = 0

    async def check(self, token: str) -> TokenInfo | str:
        """The live token's record, or why not (``unknown_token``, ``revoked_token``, ``other_role``).

        Only the answer of a lookup that started after this call came is
        shared, so a revoke committed before it came is always seen; and
        only an answer: when that lookup fails or is cancelled (its
        connection went away), the waiters look up again.
        """
        key = digest(token)
        came_after = self.lookups  # the lookups started before this call came: their answers may be stale
        while (lookup := self._under_way.get(key)) is not None:
            await lookup.done.wait()
            if lookup.answered and lookup.number > came_after:
                self.shared += 1
                return lookup.info
        lookup = self._under_way[key] = _Lookup()
        try:
            await trio.lowlevel.checkpoint()  # the handshakes read in this same step join before it starts
            self.lookups += 1
            lookup.number = self.lookups
            lookup.info = await self._store.run(token_verdict, token=token, roles=self._roles)
            lookup.answered = True
            return lookup.info
        finally:
            del self._under_way[key]
            lookup.done.set()
