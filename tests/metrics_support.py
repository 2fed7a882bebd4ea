"""Reading a Prometheus exposition in tests, with the client library's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def exposition_samples(text: str | bytes) -> Samples:
    """Every sample of a valid exposition, keyed by name and sorted labels."""
    if isinstance(text, bytes):
        text = text.decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}
