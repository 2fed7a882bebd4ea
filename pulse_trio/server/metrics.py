"""In-process counters the service keeps about itself, and their Prometheus face.

The hot path only bumps plain attributes (``frames_in += 1``, a Counter
item): no locks, no label lookups. The two latency histograms use
``prometheus_client.Histogram`` (one short lock per observation, once per
assignment or transaction). Everything else is turned into metric families
only when ``/metrics`` is scraped, from these attributes and a
:class:`Snapshot` the HTTP layer gathers (hub, store statistics, task
counts from the database).

Each service instance has its own ``CollectorRegistry``, so several
instances in one process (tests) never share series.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import functools
import time
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

LATENCY_SAMPLE = 10_000
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Seconds; submit→assign spans "already waiting" (ms) to "queued behind a backlog" (minutes).
ASSIGN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
TRANSACTION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """What a scrape reads besides the counters (gathered by the HTTP layer)."""

    hub: Mapping[str, int]  # SessionHub.statistics()
    store: Any  # StoreStatistics
    queues: Mapping[str, Mapping[str, Any]] | None  # queue_depths(); None: the database did not answer


class ServiceMetrics:
    def __init__(self) -> None:
        self.frames_in = 0
        self.frames_out = 0
        self.frame_bytes_in = 0
        self.frame_bytes_out = 0
        self.assignments = 0
        self.commands: collections.Counter[str] = collections.Counter()
        self.finishes: collections.Counter[str] = collections.Counter()
        self.lease_ends: collections.Counter[str] = collections.Counter()
        self.nodes_declared_lost = 0  # other serve processes this one declared lost
        self.lost_node_sessions = 0  # their sessions, disconnected by this one's sweeps
        self.node_rejoins = 0  # times this process found itself declared lost
        self.node_fenced = 0  # times this process ended its sessions, cut off from the database
        self.errors: collections.Counter[tuple[str, str]] = collections.Counter()  # (surface, code)
        self.http_requests: collections.Counter[tuple[str, str, int]] = collections.Counter()
        self.submit_to_assign_s: collections.deque[float] = collections.deque(maxlen=LATENCY_SAMPLE)

        self.registry = CollectorRegistry(auto_describe=False)
        self.submit_to_assign = Histogram(
            "pulse_submit_to_assign_seconds", "Time from a task being due (submitted or promoted) to its offer.",
            buckets=ASSIGN_BUCKETS, registry=self.registry)
        self.transaction_seconds = Histogram(
            "pulse_store_transaction_seconds",
            "Time an awaited store transaction took, waiting for a pool thread included.",
            buckets=TRANSACTION_BUCKETS, registry=self.registry)
        self._snapshot: Snapshot | None = None
        self.registry.register(_Families(self))

    # -- the hot path ----------------------------------------------------------
    def observe_assign(self, offer: Any, now: dt.datetime) -> None:
        self.assignments += 1
        waited = (now - max(offer.task.created_at, offer.task.due_at)).total_seconds()
        if waited >= 0:
            self.submit_to_assign_s.append(waited)
            self.submit_to_assign.observe(waited)

    def count_command(self, message: Any, result: Any) -> None:
        self.commands[type(message).__name__] += 1
        status = getattr(message, "status", None)
        if status is not None and not result.receipt.duplicate:
            self.finishes[status] += 1

    def count_lease_end(self, state: str) -> None:
        self.lease_ends[state] += 1

    def count_frame_in(self, size: int) -> None:
        """One frame read, ``size`` bytes of UTF-8."""
        self.frames_in += 1
        self.frame_bytes_in += size

    def count_frame_out(self, size: int) -> None:
        self.frames_out += 1
        self.frame_bytes_out += size

    def count_error(self, code: str, surface: str = "worker") -> None:
        """An error answered to a worker (``surface="worker"``) or an HTTP client (``"http"``)."""
        self.errors[(surface, code)] += 1

    def count_http(self, method: str, route: str, status: int) -> None:
        self.http_requests[(method, route, status)] += 1

    def instrument_store(self, store: Any) -> None:
        """Time every awaited transaction of ``store`` into ``pulse_store_transaction_seconds``.

        Wraps the instance's async entry points (``run``, and ``run_batch``
        where the store has it), so the facade itself stays free of metrics.
        """
        for name in ("run", "run_batch"):
            original = getattr(store, name, None)
            if original is not None and not getattr(original, "__pulse_timed__", False):
                setattr(store, name, _timed(original, self.transaction_seconds))

    # -- scraping ----------------------------------------------------------------
    def exposition(self, snapshot: Snapshot) -> bytes:
        """The Prometheus text format of everything, with ``snapshot`` for the gauges."""
        self._snapshot = snapshot
        try:
            return generate_latest(self.registry)
        finally:
            self._snapshot = None


def _timed(run: Any, histogram: Histogram) -> Any:
    @functools.wraps(run)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await run(*args, **kwargs)
        finally:
            histogram.observe(time.perf_counter() - started)

    timed.__pulse_timed__ = True  # type: ignore[attr-defined]
    return timed


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _labelled(name: str, doc: str, labels: list[str], items: Mapping[Any, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)
    for key, value in sorted(items.items()):
        family.add_metric([str(k) for k in (key if isinstance(key, tuple) else (key,))], value)
    return family


class _Families:
    """Builds the metric families at scrape time (a prometheus_client custom collector)."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        yield _counter("pulse_frames_received", "Worker frames read.", m.frames_in)
        yield _counter("pulse_frames_sent", "Worker frames sent.", m.frames_out)
        yield _counter("pulse_frame_bytes_received", "UTF-8 bytes of worker frames read.", m.frame_bytes_in)
        yield _counter("pulse_frame_bytes_sent", "UTF-8 bytes of worker frames sent.", m.frame_bytes_out)
        yield _counter("pulse_assignments", "Tasks offered to workers (task.assign).", m.assignments)
        yield _counter("pulse_lease_expiries", "Started leases that expired without renewal.",
                       m.lease_ends.get("EXPIRED", 0))
        yield _counter("pulse_lease_lapses", "Offers that lapsed before task.start.", m.lease_ends.get("LAPSED", 0))
        yield _counter("pulse_nodes_declared_lost", "Other serve processes this one declared lost (heartbeat lapsed).",
                       m.nodes_declared_lost)
        yield _counter("pulse_lost_node_sessions", "Sessions of lost serve processes this one disconnected.",
                       m.lost_node_sessions)
        yield _counter("pulse_node_rejoins", "Times this process found itself declared lost, closed its "
                       "connections and rejoined.", m.node_rejoins)
        yield _counter("pulse_node_fenced", "Times this process could not record a heartbeat for over a lapse "
                       "and ended its sessions.", m.node_fenced)
        yield _labelled("pulse_finishes", "Accepted task.finish commands, by status.", ["status"], m.finishes)
        yield _labelled("pulse_commands", "Lease commands answered with an ack, by message.", ["command"],
                        m.commands)
        yield _labelled("pulse_errors", "Errors answered, by surface (worker or http) and code.",
                        ["surface", "code"], m.errors)
        yield _labelled("pulse_http_requests", "HTTP API requests, by method, route and status.",
                        ["method", "route", "status"], m.http_requests)
        snapshot = m._snapshot
        if snapshot is None:
            return
        hub = snapshot.hub
        yield GaugeMetricFamily("pulse_sessions_connected", "Worker sessions registered on this instance.",
                                value=hub.get("sessions", 0))
        yield GaugeMetricFamily("pulse_session_capacity", "Capacity declared by this instance's sessions.",
                                value=hub.get("capacity", 0))
        yield GaugeMetricFamily("pulse_session_active_leases", "Leases held by this instance's sessions.",
                                value=hub.get("active_leases", 0))
        store = snapshot.store
        for field, doc in (("commits", "Store transactions committed."),
                           ("rollbacks", "Store transactions rolled back (refusals, reads)."),
                           ("retries", "Store transaction attempts retried (deadlock, lock wait, lost connection)."),
                           ("recoveries", "Transactions re-run after a COMMIT whose outcome was unknown.")):
            yield _counter(f"pulse_store_{field}", doc, getattr(store, field))
        yield GaugeMetricFamily("pulse_store_threads_busy", "Store worker threads running a transaction now.",
                                value=store.threads_busy)
        yield GaugeMetricFamily("pulse_database_up", "1 if the database answered this scrape's query.",
                                value=0 if snapshot.queues is None else 1)
        if snapshot.queues is None:
            return
        tasks = GaugeMetricFamily("pulse_tasks", "Tasks in the database, by queue and state.",
                                  labels=["queue", "state"])
        oldest = GaugeMetricFamily("pulse_oldest_ready_age_seconds", "Age of the oldest due READY task, by queue.",
                                   labels=["queue"])
        for queue, entry in sorted(snapshot.queues.items()):
            for state, count in sorted(entry["states"].items()):
                tasks.add_metric([queue, state], count)
            if entry.get("oldest_ready_age_s") is not None:
                oldest.add_metric([queue], entry["oldest_ready_age_s"])
        yield tasks
        yield oldest
