"""``/metrics`` of a serve group: every member's own series, summed, whichever member answers.

The members share the HTTP API's listening socket, so a scrape reaches one
of them at random. Each member writes its own series (Prometheus text) to a
file of the group's directory every :data:`PUBLISH_INTERVAL_S`, and the one
answering sums every member's file. It reads its own from the file too, not
live: a counter that one scrape read live and the next from a file up to a
second old would seem to go backwards, which Prometheus takes for a restart.
The database's series are read once per scrape, by the member answering.

A member that stops removes its file, then the directory if it was the
last: the directory is memory (``/dev/shm``), and the parent that made it
may be gone (killed) when its members stop by themselves.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import trio
from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

PUBLISH_INTERVAL_S = 1.0
_SUFFIX = ".prom"


class SharedMetrics:
    """Member ``index``'s side of the group's metrics directory."""

    def __init__(self, directory: Path, index: int) -> None:
        self.directory, self.index = directory, index

    def publish(self, text: bytes) -> None:
        """Replace this member's file with ``text`` (readers see the old one or the new one, never a part)."""
        path = self._path()
        partial = path.with_suffix(".partial")
        try:
            partial.write_bytes(text)
        except FileNotFoundError:  # the last other member removed the directory: the group is stopping
            return
        os.replace(partial, path)

    def withdraw(self) -> None:
        """Remove this member's file, and the directory once no member has one there (this member stops)."""
        self._path().unlink(missing_ok=True)
        self._path().with_suffix(".partial").unlink(missing_ok=True)
        try:
            self.directory.rmdir()
        except OSError:  # another member's file is still there (or the parent removed it already)
            pass

    def _path(self) -> Path:
        return self.directory / f"{self.index}{_SUFFIX}"

    async def publish_every(self, own: Callable[[], bytes], interval: float = PUBLISH_INTERVAL_S) -> None:
        """Publish ``own()`` now and every ``interval`` seconds until cancelled."""
        while True:
            self.publish(own())
            await trio.sleep(interval)

    def merged(self) -> bytes:
        """Every member's last published series, summed by name and labels."""
        texts = [path.read_text("utf-8") for path in sorted(self.directory.glob(f"*{_SUFFIX}"))]
        return generate_latest(_Summed(texts))


class _Summed:
    """The families of several expositions with equal samples added (a prometheus_client custom collector)."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
        for text in self.texts:
            for family in text_string_to_metric_families(text):
                if family.name not in families:
                    families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                    values[family.name] = {}
                summed = values[family.name]
                for sample in family.samples:
                    key = (sample.name, tuple(sample.labels.items()))
                    summed[key] = summed.get(key, 0.0) + sample.value
        for name, family in families.items():
            for (sample_name, labels), value in values[name].items():
                family.add_sample(sample_name, dict(labels), value)
            yield family
