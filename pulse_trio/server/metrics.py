"""In-process counters the service keeps about itself, and their Prometheus face.

The hot path only bumps plain attributes (``frames_in += 1``, a Counter
item, a bucket of a :class:`_Histogram`): no locks, no label objects, no
extra SQL. Values from the store (a start's due time, a finish's start
time, a timer's ended leases) come back in the results the server already
receives. Everything is turned into metric families only when
``/metrics`` is scraped: this process's series from these attributes and a
:class:`Snapshot` of its hub and store (:meth:`ServiceMetrics.process_exposition`,
which a serve group sums over its members), and the database's from the
task counts the scrape read (:func:`database_exposition`).

The exposition follows the Prometheus naming guide: the unit is the suffix
(``_seconds``, ``_bytes``), every counter ends in ``_total``, each family
appears once and none has a ``_created`` companion (the histograms are
built here, not by ``prometheus_client.Histogram``, which adds one).
Each service instance has its own ``CollectorRegistry``, so several
instances in one process (tests) never share series.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import datetime as dt
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Seconds; submit→assign and due→start span "already waiting" (ms) to "queued behind a backlog" (minutes).
WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
#: Seconds; a task's run spans a no-op handler (ms) to batch jobs (hours).
RUN_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400)
#: The methods HTTP defines (RFC 9110, and PATCH): the ``method`` label takes these, and ``OTHER``.
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"})
TRANSACTION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """What a scrape reads of this process besides the counters: its sessions and its store."""

    hub: Mapping[str, int]  # SessionHub.statistics()
    store: Any  # StoreStatistics


class _Histogram:
    """Cumulative-at-scrape buckets per label value: one bisect and two additions per observation."""

    __slots__ = ("name", "doc", "labels", "bounds", "series")

    def __init__(self, name: str, doc: str, bounds: Sequence[float], labels: Sequence[str] = ()) -> None:
        self.name, self.doc, self.labels = name, doc, list(labels)
        self.bounds = tuple(float(b) for b in bounds)
        #: label values -> [count per bucket (the last is +Inf), sum]
        self.series: dict[tuple[str, ...], list[Any]] = {}

    def observe(self, value: float, *labels: str) -> None:
        series = self.series.get(labels)
        if series is None:
            series = self.series[labels] = [[0] * (len(self.bounds) + 1), 0.0]
        series[0][bisect.bisect_left(self.bounds, value)] += 1
        series[1] += value

    def count(self, *labels: str) -> int:
        series = self.series.get(labels)
        return sum(series[0]) if series is not None else 0

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        edges = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        for labels, (counts, total) in sorted(self.series.items()):
            family.add_metric(list(labels), list(zip(edges, itertools.accumulate(counts), strict=True)), total)
        if not self.labels and not self.series:  # an unlabelled histogram is shown before its first observation
            family.add_metric([], [(edge, 0) for edge in edges], 0.0)
        return family


def _seconds(later: dt.datetime, earlier: dt.datetime | None) -> float | None:
    if earlier is None:
        return None
    seconds = (later - earlier).total_seconds()
    return seconds if seconds >= 0 else None


class ServiceMetrics:
    def __init__(self) -> None:
        self.frames_in = 0
        self.frames_out = 0
        self.frame_bytes_in = 0
        self.frame_bytes_out = 0
        self.assignments: collections.Counter[str] = collections.Counter()  # queue
        self.commands: collections.Counter[str] = collections.Counter()
        self.finishes: collections.Counter[tuple[str, str]] = collections.Counter()  # (queue, status)
        self.lease_ends: collections.Counter[str] = collections.Counter()
        self.uncertain_redispatches: collections.Counter[str] = collections.Counter()  # queue
        self.permits_quarantined: collections.Counter[str] = collections.Counter()  # queue
        self.nodes_declared_lost = 0  # other serve processes this one declared lost
        self.lost_node_sessions = 0  # their sessions, disconnected by this one's sweeps
        self.node_rejoins = 0  # times this process found itself declared lost
        self.node_fenced = 0  # times this process ended its sessions, cut off from the database
        self.purged: collections.Counter[str] = collections.Counter()  # rows the retention purge deleted, by table
        self.purge_batches = 0  # purge transactions that deleted something
        self.errors: collections.Counter[tuple[str, str]] = collections.Counter()  # (surface, code)
        self.http_requests: collections.Counter[tuple[str, str, int]] = collections.Counter()
        self.handshake_refusals: collections.Counter[str] = collections.Counter()  # cause (handshake.REFUSAL_CAUSES)

        self.submit_to_assign = _Histogram(
            "pulse_submit_to_assign_seconds", "Time from a task being due (submitted or promoted) to its offer.",
            WAIT_BUCKETS, ["queue"])
        self.queue_wait = _Histogram(
            "pulse_task_queue_wait_seconds", "Time from a task being due to the start of the attempt that ran it.",
            WAIT_BUCKETS, ["queue"])
        self.run_time = _Histogram(
            "pulse_task_run_seconds", "Time from an attempt's task.start to its accepted task.finish.",
            RUN_BUCKETS, ["queue"])
        self.transaction_seconds = _Histogram(
            "pulse_store_transaction_seconds",
            "Time an awaited store transaction took, waiting for a pool thread included.", TRANSACTION_BUCKETS)
        self._snapshot: Snapshot | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Families(self))

    def observe_purge(self, deleted: Mapping[str, int]) -> None:
        """One retention batch: the rows it deleted, per table."""
        if any(deleted.values()):
            self.purge_batches += 1
            self.purged.update({table: n for table, n in deleted.items() if n})

    # -- the hot path ----------------------------------------------------------
    def observe_assign(self, offer: Any, now: dt.datetime) -> None:
        task = offer.task
        self.assignments[task.queue] += 1
        waited = _seconds(now, max(task.created_at, task.due_at))
        if waited is not None:
            self.submit_to_assign.observe(waited, task.queue)

    def count_command(self, message: Any, result: Any) -> None:
        """An acked lease command; ``result`` is the store's CommandAck."""
        self.commands[type(message).__name__] += 1
        receipt = result.receipt
        if receipt.duplicate or result.queue is None:
            return
        if receipt.command == "task.start":
            waited = _seconds(receipt.committed_at, result.due_at)
            if waited is not None:
                self.queue_wait.observe(waited, result.queue)
        elif receipt.command == "task.finish":
            self.finishes[(result.queue, message.status)] += 1
            ran = _seconds(receipt.committed_at, result.started_at)
            if ran is not None:
                self.run_time.observe(ran, result.queue)

    def count_lease_end(self, end: Any) -> None:
        """A lease a timer ended (a store ``LeaseEnd``)."""
        self.lease_ends[end.state] += 1
        if end.state == "EXPIRED" and end.task_state == "READY":  # back to READY, marked effect_uncertain
            self.uncertain_redispatches[end.queue] += 1
        if end.permit_quarantined:
            self.permits_quarantined[end.queue] += 1

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

    def count_handshake_refusal(self, cause: str) -> None:
        """A worker handshake refused; ``cause`` is one of ``handshake.REFUSAL_CAUSES``, never what the client sent."""
        self.handshake_refusals[cause] += 1

    def count_http(self, method: str, route: str, status: int) -> None:
        """One answered request; a method HTTP does not define is counted as ``OTHER`` (any token parses)."""
        self.http_requests[(method if method in HTTP_METHODS else "OTHER", route, status)] += 1

    def observe_transaction(self, seconds: float) -> None:
        """An awaited store transaction took ``seconds`` (the store's ``on_transaction`` hook)."""
        self.transaction_seconds.observe(seconds)

    # -- scraping ----------------------------------------------------------------
    def process_exposition(self, snapshot: Snapshot) -> bytes:
        """This process's own series: its counters, and its sessions and store from ``snapshot``.

        A serve group sums these across its processes; the database's series
        (:func:`database_exposition`) are read once per scrape.
        """
        self._snapshot = snapshot
        try:
            return generate_latest(self.registry)
        finally:
            self._snapshot = None


def database_exposition(queues: Mapping[str, Mapping[str, Any]] | None) -> bytes:
    """What a scrape read from the database: whether it answered, and the tasks by queue and state."""
    return generate_latest(_DatabaseFamilies(queues))


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
        yield _counter("pulse_frames_received_total", "Worker frames read.", m.frames_in)
        yield _counter("pulse_frames_sent_total", "Worker frames sent.", m.frames_out)
        yield _counter("pulse_frames_received_bytes_total", "UTF-8 bytes of worker frames read.", m.frame_bytes_in)
        yield _counter("pulse_frames_sent_bytes_total", "UTF-8 bytes of worker frames sent.", m.frame_bytes_out)
        yield _labelled("pulse_assignments_total", "Tasks offered to workers (task.assign), by queue.", ["queue"],
                        m.assignments)
        yield _labelled("pulse_finishes_total", "Accepted task.finish commands, by queue and status.",
                        ["queue", "status"], m.finishes)
        yield m.submit_to_assign.family()
        yield m.queue_wait.family()
        yield m.run_time.family()
        yield _counter("pulse_lease_expiries_total", "Started leases that expired without renewal.",
                       m.lease_ends.get("EXPIRED", 0))
        yield _labelled("pulse_lease_expiry_redispatches_total", "Expired leases whose task went back to READY "
                        "marked effect_uncertain, by queue.", ["queue"], m.uncertain_redispatches)
        yield _labelled("pulse_permits_quarantined_total", "Concurrency-key permits quarantined when their lease "
                        "expired, by queue.", ["queue"], m.permits_quarantined)
        yield _counter("pulse_lease_lapses_total", "Offers that lapsed before task.start.",
                       m.lease_ends.get("LAPSED", 0))
        yield _counter("pulse_nodes_declared_lost_total",
                       "Other serve processes this one declared lost (heartbeat lapsed).", m.nodes_declared_lost)
        yield _counter("pulse_lost_node_sessions_total", "Sessions of lost serve processes this one disconnected.",
                       m.lost_node_sessions)
        yield _counter("pulse_node_rejoins_total", "Times this process found itself declared lost, closed its "
                       "connections and rejoined.", m.node_rejoins)
        yield _counter("pulse_node_fenced_total", "Times this process could not record a heartbeat for over a "
                       "lapse and ended its sessions.", m.node_fenced)
        yield _labelled("pulse_purged_rows_total", "Rows this process's retention purge deleted, by table.",
                        ["table"], m.purged)
        yield _counter("pulse_purge_batches_total", "Retention purge transactions of this process that deleted "
                       "rows.", m.purge_batches)
        yield _labelled("pulse_commands_total", "Lease commands answered with an ack, by message.", ["command"],
                        m.commands)
        yield _labelled("pulse_errors_total", "Errors answered, by surface (worker or http) and code.",
                        ["surface", "code"], m.errors)
        yield _labelled("pulse_worker_handshakes_refused_total", "Worker handshakes refused before a WebSocket "
                        "opened, by cause.", ["reason"], m.handshake_refusals)
        yield _labelled("pulse_http_requests_total", "HTTP API requests, by method, route and status.",
                        ["method", "route", "status"], m.http_requests)
        yield m.transaction_seconds.family()
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
            yield _counter(f"pulse_store_{field}_total", doc, getattr(store, field))
        yield GaugeMetricFamily("pulse_store_threads_busy", "Store worker threads running a transaction now.",
                                value=store.threads_busy)


class _DatabaseFamilies:
    """The families of what one scrape read from the database (a prometheus_client custom collector)."""

    def __init__(self, queues: Mapping[str, Mapping[str, Any]] | None) -> None:
        self.queues = queues

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("pulse_database_up", "1 if the database answered this scrape's query.",
                                value=0 if self.queues is None else 1)
        if self.queues is None:
            return
        tasks = GaugeMetricFamily("pulse_tasks", "Tasks waiting or held by a lease, by queue and state.",
                                  labels=["queue", "state"])
        oldest = GaugeMetricFamily("pulse_oldest_ready_age_seconds", "Age of the oldest due READY task, by queue.",
                                   labels=["queue"])
        # At most fairness.TOP_KEYS keys per queue, the rest as fairness_key="other": bounded label sets.
        fair_ready = GaugeMetricFamily("pulse_fairness_ready_tasks",
                                       "READY tasks by queue and fairness key (the keys with the most, then other).",
                                       labels=["queue", "fairness_key"])
        fair_recent = GaugeMetricFamily("pulse_fairness_recent_finished_tasks",
                                        "Tasks finished in the last 5 minutes by queue and fairness key (same keys).",
                                        labels=["queue", "fairness_key"])
        for queue, entry in sorted(self.queues.items()):
            for state, count in sorted(entry["states"].items()):
                tasks.add_metric([queue, state], count)
            if entry.get("oldest_ready_age_s") is not None:
                oldest.add_metric([queue], entry["oldest_ready_age_s"])
            for row in entry.get("fairness", ()):
                fair_ready.add_metric([queue, row["fairness_key"]], row["ready"])
                fair_recent.add_metric([queue, row["fairness_key"]], row["recent_finished"])
        yield tasks
        yield oldest
        yield fair_ready
        yield fair_recent
