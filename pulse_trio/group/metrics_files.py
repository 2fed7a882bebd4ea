"""``/metrics`` of a serve group: every member's own series, summed, whichever member answers.

The members share the HTTP API's listening socket, so a scrape reaches one
of them at random. Each member writes its own series (Prometheus text) to a
file of the group's directory every :data:`PUBLISH_INTERVAL_S`, and the one
answering sums every member's file. It reads its own from the file too, not
live: a counter that one scrape read live and the next from a file up to a
second old would seem to go backwards, which Prometheus takes for a restart.
The database's series are read once per scrape, by the member answering.

A member that stops leaves its file, marked stopped, so its counters stay
in the sum while the others still answer: taken out, they would make the
group's counters go down, which Prometheus takes for a restart. The last
member to stop removes every file and the directory: the directory is
memory (``/dev/shm``), and the parent that made it may be gone (killed)
when its members stop by themselves.
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
#: Beside a member's file once it has stopped.
_STOPPED = ".stopped"


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
        """Mark this member stopped; once every member with a file is, remove them all and the directory."""
        self._path().with_suffix(".partial").unlink(missing_ok=True)
        try:
            self._path().with_suffix(_STOPPED).touch()
            names = {path.name for path in self.directory.iterdir()}
        except FileNotFoundError:  # the last other member (or the parent) removed the directory already
            return
        published = {name.removesuffix(_SUFFIX) for name in names if name.endswith(_SUFFIX)}
        if any(f"{index}{_STOPPED}" not in names for index in published):
            return  # a member still runs (or was killed: the parent removes the directory)
        for name in names:
            if name.endswith((_SUFFIX, _STOPPED)):
                (self.directory / name).unlink(missing_ok=True)
        try:
            self.directory.rmdir()
        except OSError:  # a member still starting is writing its first file, which it removes when it stops
            pass

    def _path(self) -> Path:
        return self.directory / f"{self.index}{_SUFFIX}"

    async def publish_every(self, own: Callable[[], bytes], interval: float = PUBLISH_INTERVAL_S) -> None:
        """Publish ``own()`` now and every ``interval`` seconds until cancelled."""
        while True:
            self.publish(own())
            await trio.sleep(interval)

    def merged(self) -> bytes:
        """Every member's last published series, summed by name and labels (a stopped member's too)."""
        try:
            paths = sorted(self.directory.glob(f"*{_SUFFIX}"))
        except FileNotFoundError:  # the last member to stop removed the directory as it was listed
            paths = []
        texts: list[str] = []
        for path in paths:
            try:
                texts.append(path.read_text("utf-8"))
            except FileNotFoundError:  # removed since the listing, by the last member to stop
                pass
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
