"""In-process counters the service keeps about itself.

Plain attributes and a bounded latency sample: cheap enough for the hot
path, read by the HTTP ``/metrics`` endpoint and the bench.
"""

from __future__ import annotations

import collections
import datetime as dt
from typing import Any

LATENCY_SAMPLE = 10_000


class ServiceMetrics:
    def __init__(self) -> None:
        self.frames_in = 0
        self.frames_out = 0
        self.assignments = 0
        self.commands: collections.Counter[str] = collections.Counter()
        self.finishes: collections.Counter[str] = collections.Counter()
        self.lease_ends: collections.Counter[str] = collections.Counter()
        self.submit_to_assign_s: collections.deque[float] = collections.deque(maxlen=LATENCY_SAMPLE)

    def observe_assign(self, offer: Any, now: dt.datetime) -> None:
        self.assignments += 1
        waited = (now - max(offer.task.created_at, offer.task.due_at)).total_seconds()
        if waited >= 0:
            self.submit_to_assign_s.append(waited)

    def count_command(self, message: Any, result: Any) -> None:
        self.commands[type(message).__name__] += 1
        status = getattr(message, "status", None)
        if status is not None and not result.receipt.duplicate:
            self.finishes[status] += 1

    def count_lease_end(self, state: str) -> None:
        self.lease_ends[state] += 1
