"""The producer client and ``pulse-trio submit`` hold numbers to the same ranges as the HTTP API."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pulse_trio.client import Client, ranges
from pulse_trio.client.producer import InvalidRequest


@pytest.mark.parametrize(("options", "fragment"), [
    (dict(delay=999999999999), "delay must be 0..315360000 seconds"),
    (dict(delay=1e9), "delay must be 0..315360000 seconds"),
    (dict(delay=float("nan")), "finite"),
    (dict(lease_ttl=99999999999), "lease_ttl must be 0.5..2147483.647 seconds"),
    (dict(lease_ttl=0.0001), "lease_ttl must be 0.5"),
    (dict(priority=True), "priority must be an integer 0..9"),
    (dict(max_attempts=2**31), "max_attempts must be 1..2147483647"),
    (dict(concurrency_limit=0), "concurrency_limit must be 1..2147483647"),
    (dict(backoff_factor=float("inf")), "backoff_factor"),
])
def test_the_client_refuses_out_of_range_numbers_before_writing(client: Client, options, fragment):
    with pytest.raises(InvalidRequest) as refused:
        client.submit("billing", "k", {}, **options)
    assert fragment in refused.value.message
    assert client.list()["tasks"] == []


def test_the_client_accepts_every_bound(client: Client):
    for field in ranges.SUBMIT.values():
        for value in (field.lo, field.hi):
            number = int(value) if field.integer else float(value)
            extra = {"backoff_max": float(ranges.BACKOFF_MAX.hi)} if field.name == "backoff_initial" else {}
            client.submit("billing", "k", {}, **{field.name: number}, **extra)


def _submit(db, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pulse_trio", "submit", "--queue", "billing", "--kind", "k", *flags,
                           "--database-url", db.url(redact=False)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("flags", "fragment"), [
    (("--delay", "999999999999"), "delay must be 0..315360000 seconds"),
    (("--lease-ttl", "0.0001"), "lease_ttl must be 0.5..2147483.647 seconds"),
    (("--lease-ttl", "99999999999"), "lease_ttl must be 0.5..2147483.647 seconds"),
    (("--priority", "10"), "priority must be an integer 0..9"),
    (("--max-attempts", "99999999999"), "max_attempts must be an integer 1..2147483647"),
    (("--backoff-factor", "nan"), "backoff_factor"),
])
def test_submit_flags_out_of_range_exit_2_without_a_traceback(db, flags, fragment):
    done = _submit(db, *flags)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert fragment in done.stderr


def test_submit_flags_at_their_bounds_are_accepted(db):
    done = _submit(db, "--delay", "315360000", "--lease-ttl", "0.5", "--priority", "9")
    assert done.returncode == 0, done.stderr
