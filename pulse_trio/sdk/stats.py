"""A worker's counters, apart from the worker: leases update them and must not import the worker."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class WorkerStats:
    """Counters for progress reports and tests (``Worker.stats``)."""

    connects: int = 0
    failed_connects: int = 0
    offers: int = 0
    rejected_offers: int = 0
    started: int = 0
    succeeded: int = 0
    failed: int = 0
    unknown: int = 0
    cancelled: int = 0
    lost: int = 0
    renewals: int = 0
    resumed: int = 0
    unsettled: int = 0
    duplicates: int = 0
    running: int = 0
    abandoned_threads: int = 0  # def handlers still in their thread when the worker stopped hard
    stuck_threads: int = 0  # def handlers of lost leases still in their thread (not declared as capacity)

    def count(self, status: str, *, duplicate: bool = False) -> None:
        name = {"SUCCEEDED": "succeeded", "FAILED": "failed", "UNKNOWN": "unknown", "CANCELLED": "cancelled"}[status]
        setattr(self, name, getattr(self, name) + 1)

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.unknown + self.cancelled


__all__ = ["WorkerStats"]
