"""The dispatcher: offers READY tasks to this instance's sessions.

One loop per instance. A pass runs when woken (a slot came free, capacity
was declared, a submit arrived through this instance) or every
``poll_interval``; every free slot counts on news, and at least once per
``max(FILL_ALL_FLOOR_S, poll_interval)`` for submits from other processes. Each pass fills free
capacity in rounds: in every round each session with free slots claims a
share proportional to its free slots, so a large worker cannot starve the
small ones. Each claim takes a whole batch for one session, and the claims
of one round share a transaction (up to ``CLAIMS_PER_TRANSACTION``).

Rounds only matter when work is scarce and several sessions want it: a
round with a single hungry session claims all that session's free slots
at once, and so does every session of a pass whose queues hold more than
all of them could take (one statement asks, in the first round's
transaction: :class:`_DepthQuestion`). When the previous pass ended with
every session full and none of them short of work, the queues are deep:
the next pass lets each session claim all its free slots at once, which
under steady load is one claim per session per pass instead of three or
four small ones.

Three more rules keep claims few (docs/priority-and-fairness.md): a pass
woken only by finished leases tops a session up once it reaches its
refill mark (``LiveSession.refill_at``), then fills what it took on;
and a pass the poll woke with nothing new (or any pass over more than
``PROBE_ABOVE`` sessions) first asks which queues have READY work, so idle
sessions cost one statement per poll, not a claim transaction each.

Offers are committed before they are pushed. The dispatcher never changes
a session: it posts a claim's offers to the session's inbox
(``session_inbox.py``), where they count as the session's leases at once,
and the connection's own results task pushes them. An offer whose push is
lost (the connection died, or its inbox is closed) simply lapses after the
start timeout, costing no attempt.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from pulse_trio.server.clock import ServiceClock
from pulse_trio.server.hub import SessionHub, Wake
from pulse_trio.server.live_settings import LiveSettings
from pulse_trio.server.outage_log import OutageLog
from pulse_trio.store.lease.assign import assign, new_credentials, queues_with_ready_work, sources_ready_at_least
from pulse_trio.store.engine.results import Refusal
from pulse_trio.store.engine.trio_bridge import Store
from pulse_trio.store.engine.tx import Tx

if TYPE_CHECKING:
    from pulse_trio.server.live_session import LiveSession

log = logging.getLogger("pulse_trio.dispatcher")

MAX_BATCH = 64
PROBE_ABOVE = 4  # more live sessions than this: ask which queues have work before claiming
FILL_ALL_FLOOR_S = 0.1  # a 10 ms poll must not turn every pass into a fill-all pass
ROUND_SHARE = 4  # a session claims about 1/ROUND_SHARE of its free slots per round
CLAIMS_PER_TRANSACTION = 16  # sessions whose claims share one transaction (and one thread hand-off)
#: A pass asks whether the queues hold enough for every hungry session only while they want at most this
#: many slots in all: the question reads that many index entries per queue.
DEPTH_PROBE_MOST = 2048


class Dispatcher:
    def __init__(self, *, store: Store, clock: ServiceClock, hub: SessionHub, settings: LiveSettings) -> None:
        self.store, self.clock, self.hub, self.settings = store, clock, hub, settings
        self.backlogged = False  # the last pass filled every session and nobody came up short
        self.claims = 0
        self.probes = 0
        self.depth_probes = 0
        self.visited = 0  # sessions put into a round: the hungry ones, never the whole hub
        self._last_fill_all = -math.inf
        self.passing = False  # a pass of run() is under way (what `settled` waits out)
        self._outage = OutageLog(log, "dispatch pass failed (database unavailable?)", "dispatch passes work again")

    async def run(self) -> None:
        hub, settings = self.hub, self.settings
        while True:
            wake = await hub.wait_woken(settings.current.poll_interval)
            news = wake is Wake.NEWS
            # Fill every free slot on news, and at least once per poll interval (0.1 s
            # at the fastest) for work other processes submitted; other passes, woken by
            # finishes or the poll, serve sessions that reached their refill mark.
            fill_all = news or trio.current_time() >= self._last_fill_all + max(FILL_ALL_FLOOR_S,
                                                                                settings.current.poll_interval)
            if fill_all:
                self._last_fill_all = trio.current_time()
            self.passing = True
            try:
                await self.dispatch_pass(fill_all=fill_all, probe=wake is Wake.TIMEOUT)
            except Exception:
                self._outage.failed()  # every poll through an outage: one traceback for the whole of it
                await trio.sleep(settings.current.poll_interval)
            else:
                self._outage.worked()
            finally:
                self.passing = False

    @property
    def settled(self) -> bool:
        """No pass under way and none asked for: what the sessions hold now stays until new news.

        A pass takes its hungry sessions when it begins, so one begun before a
        session registered claims without it (a lone session claims all it can).
        """
        return not self.passing and not self.hub.wake_pending()

    async def dispatch_pass(self, *, fill_all: bool = True, probe: bool = False) -> int:
        """Fill free capacity until the sessions are full or the queues are dry.

        A session is taken on when it has as many free slots as its refill
        mark, or any free slot in the first round of a ``fill_all`` pass
        (new work, new capacity, the poll); the pass then fills the slots it
        had, round by round, and takes it on no more. Slots that finishes
        free during the pass wait for the next pass: under a steady stream
        of finishes the pass still ends, and its end is what lets the next
        pass see deep queues and claim in full.

        ``probe`` (a pass the poll woke, with no news) and a hub of more than
        ``PROBE_ABOVE`` sessions first ask which queues have READY work.
        """
        hub = self.hub
        dry: set[str] = set()
        second_chance: set[str] = set()
        retrying: set[str] = set()  # second-chance sessions: they claim alone in the next round
        offered = 0
        round_share = 1 if self.backlogged else ROUND_SHARE
        owed: dict[str, int] = {}  # free slots a session had when this pass took it on
        taken_on: dict[str, LiveSession] = {}
        ripe_only = not fill_all  # the first round's bar: any free slot, or the refill mark

        ready: set[str] | None = None
        if (probe or len(hub) > PROBE_ABOVE) and not self.backlogged and hub.has_hungry(ripe_only=ripe_only):
            ready = await self._ready_queues()
            if not ready:
                return 0  # idle: one statement, and no walk over the sessions
        # The first round: the hungry sessions the hub filed, on the queues with work when probed.
        hungry = hub.hungry(ripe_only=ripe_only, queues=ready)
        if ready is not None and len(hungry) < hub.hungry_count(ripe_only=ripe_only):
            dry_elsewhere = True  # some hungry session's queues have no READY work: the queues are not deep
        else:
            dry_elsewhere = False
        # Work enough for every hungry session: rounds would not change who gets what.
        depth = _DepthQuestion.of(hungry, self.hub.paused) if round_share > 1 and len(hungry) > 1 else None
        while True:
            if retrying:
                hungry = [s for s in hungry if s.session_id in retrying] or hungry
            if not hungry:
                if offered or dry or dry_elsewhere:  # a pass that found nobody hungry says nothing about the queues
                    self.backlogged = not (dry or dry_elsewhere)
                return offered
            self.visited += len(hungry)
            for session in hungry:
                if session.session_id not in owed:
                    owed[session.session_id] = session.free_slots
                    taken_on[session.session_id] = session
            # Fairness is between sessions that want work at the same time: one hungry
            # session has nobody to share with, so it claims all it wants at once. A
            # second chance keeps its share: the others are still hungry.
            alone = len(hungry) == 1 and not retrying
            counts = await self._claim(hungry, 1 if alone else round_share, dry, None if alone else depth)
            if depth is not None and not alone:
                self.depth_probes += depth.deep is not None  # not asked if the round fell back to one claim each
                round_share = 1 if depth.deep else round_share
                depth = None  # asked once per pass
            claimed = sum(counts.values())
            offered += claimed
            for sid, count in counts.items():
                owed[sid] -= count
            was_retry, retrying = bool(retrying), set()
            if claimed == 0 and not was_retry:
                self.backlogged = False
                return offered
            # A session that came up empty while others found work may have claimed
            # before that work committed (a burst landing mid-pass): ask it once more
            # in this pass, alone, or the others would take the whole burst in later rounds.
            for session in hungry:
                sid = session.session_id
                if not counts.get(sid) and sid in dry and sid not in second_chance:
                    second_chance.add(sid)
                    retrying.add(sid)
                    dry.discard(sid)
            hungry = self._next_round(taken_on, owed, dry, ready)

    def _next_round(self, taken_on: dict[str, LiveSession], owed: dict[str, int], dry: set[str],
                    ready: set[str] | None) -> list[LiveSession]:
        """Who claims in the next round: the sessions taken on that are still owed slots, then the
        sessions that reached their refill mark during the pass (from the hub's ripe set; on the
        probed queues only, when the pass probed: the others found nothing to claim)."""
        hub = self.hub
        hungry = [s for sid, s in taken_on.items()
                  if owed[sid] > 0 and sid not in dry and s.free_slots >= 1 and hub.get(sid) is s]
        hungry += [s for s in hub.hungry(ripe_only=True, queues=ready)
                   if s.session_id not in owed and s.session_id not in dry]
        return hungry

    def statistics(self) -> dict[str, int]:
        return {"claims": self.claims, "probes": self.probes, "depth_probes": self.depth_probes,
                "visited": self.visited, "backlogged": int(self.backlogged)}

    async def _ready_queues(self) -> set[str]:
        """The subscribed queues with READY work; sessions on the others are dry for the pass.

        Thousands of idle sessions on empty queues would otherwise cost a
        claim transaction each on every poll, and a walk over all of them.
        """
        self.probes += 1
        return await self.store.run(queues_with_ready_work, queues=self.hub.hungry_queues())

    async def _claim(self, hungry: list[LiveSession], round_share: int, dry: set[str],
                     depth: _DepthQuestion | None = None) -> dict[str, int]:
        """One round: each hungry session claims its share, all in one transaction (one thread hand-off).

        With ``depth``, the transaction first asks it, and each claim takes all
        its session's free slots instead of its share if the answer is yes.
        """
        settings = self.settings
        now = self.clock.now()
        start_timeout_ms, lease_ttl_ms = settings.start_timeout_ms, settings.lease_ttl_ms
        shares = [min(MAX_BATCH, max(1, math.ceil(s.free_slots / round_share))) for s in hungry]
        full = shares if depth is None else [min(MAX_BATCH, max(1, s.free_slots)) for s in hungry]
        # Each session's lease count goes with its claim (held=): the claim need not count them again.
        calls = [(assign, {"session_id": s.session_id, "credentials": new_credentials(most), "want": share,
                           "now": now, "start_timeout_ms": start_timeout_ms, "default_lease_ttl_ms": lease_ttl_ms,
                           "paused": self.hub.paused, "held": s.active_leases})
                 for s, share, most in zip(hungry, shares, full)]
        self.claims += len(calls)
        # Each held= is a count taken now: until the claim is settled, a resume into one of
        # these sessions waits (SessionInbox.claim_settled), or both could fill one slot.
        claims = [session.inbox.claim_begun() for session in hungry]
        try:
            results = await self._run_claims(calls, hungry, None if depth is None else depth.asker(calls, full))
            return self._settle(hungry, [call["want"] for _, call in calls], calls, results, dry)
        finally:
            for session, claim in zip(hungry, claims):
                session.inbox.claim_settled(claim)

    async def _run_claims(self, calls: list, hungry: list[LiveSession],
                          first: Callable[[Tx], None] | None = None) -> list:
        results: list = []
        try:
            for start in range(0, len(calls), CLAIMS_PER_TRANSACTION):
                results += await self.store.run_batch(calls[start:start + CLAIMS_PER_TRANSACTION], first=first)
        except BaseException:
            # Some of these claims may have committed, and none is pushed: count what they may hold.
            for session, (_, call) in zip(hungry, calls):
                session.inbox.leases_uncertain(c.lease_id for c in call["credentials"])
            raise
        return results

    @staticmethod
    def _settle(hungry: list[LiveSession], wants: list[int], calls: list, results: list,
                dry: set[str]) -> dict[str, int]:
        """Post each claim's committed offers to its session's inbox; a refused, failed or short claim is dry."""
        counts: dict[str, int] = {}
        for session, want, (_, call), result in zip(hungry, wants, calls, results, strict=True):
            if isinstance(result, (Refusal, BaseException)):
                if isinstance(result, BaseException):
                    log.warning("claim for %s failed: %r", session.session_id, result)
                    # Its outcome is unknown: count the leases it may have made until reconciled.
                    session.inbox.leases_uncertain(c.lease_id for c in call["credentials"])
                dry.add(session.session_id)
                continue
            got = len(result.offers)
            counts[session.session_id] = got
            session.inbox.offers_committed(result)  # counted at once; a closed inbox drops them (they lapse)
            if got < want:  # the queues are dry for this session
                dry.add(session.session_id)
        return counts


class _DepthQuestion:
    """Whether the queues hold more READY work than every hungry session of a pass could take.

    If they do, the proportional rounds would not change who gets what, and
    each session claims all its free slots at once: slots filled together
    stay together (one claim, one start batch and one finish batch per cycle
    of a session's slots, where rounds of a quarter would cut them into
    cohorts that each cost their own statements for as long as the queues
    stay deep). It is asked first in the transaction of the pass's first
    round (:meth:`asker`), so an idle submit costs no extra thread hand-off.

    The question errs towards "not enough". Per queue: the READY tasks of
    the kinds a session names must cover every hungry session that could
    take them (those naming one of those kinds, and those taking every
    kind), and the queue's READY tasks all of its hungry sessions when one
    of them takes every kind. A session counts against each of its queues.
    """

    def __init__(self, wants: dict[tuple[str, frozenset[str] | None], int]) -> None:
        self.wants = wants
        self.deep: bool | None = None  # None: not asked (yet)

    @classmethod
    def of(cls, hungry: list[LiveSession], paused: frozenset[str] | None) -> _DepthQuestion | None:
        """The question for these sessions; None when it would read too much (or there is nothing to ask)."""
        paused = paused or frozenset()
        total: dict[str, int] = {}  # every hungry session's free slots, per queue
        every_kind: dict[str, int] = {}  # those of the sessions that take every kind of the queue
        named: dict[str, list[tuple[frozenset[str], int]]] = {}  # the kinds each other session names
        for session in hungry:
            free = session.free_slots
            for queue, kinds in session.queues.items():
                if queue in paused:
                    continue
                total[queue] = total.get(queue, 0) + free
                if kinds is None:
                    every_kind[queue] = every_kind.get(queue, 0) + free
                else:
                    named.setdefault(queue, []).append((kinds, free))
        wants: dict[tuple[str, frozenset[str] | None], int] = {(q, None): total[q] for q in every_kind}
        for queue, sets in named.items():
            for kinds in {k for k, _ in sets}:
                rivals = sum(free for other, free in sets if other & kinds)
                wants[(queue, kinds)] = rivals + every_kind.get(queue, 0)
        if not wants or sum(wants.values()) > DEPTH_PROBE_MOST:
            return None
        return cls(wants)

    def asker(self, calls: list, full: list[int]) -> Callable[[Tx], None]:
        """What runs first in the round's transaction: ask once, and if deep let each claim take ``full``."""
        def ask(tx: Tx) -> None:
            if self.deep is None:
                self.deep = sources_ready_at_least(tx, wants=self.wants) == set(self.wants)
            if self.deep:
                for (_, call), most in zip(calls, full, strict=True):
                    call["want"] = most
        return ask
